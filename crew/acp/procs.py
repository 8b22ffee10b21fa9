"""Process groups for the agent (issue 24 item 7).

The agent starts in a new session (`start_new_session=True`), so that a launcher (`npx …`, a node
script starting the real binary) and what it starts form one group, signalled together: nothing they
started in that group is left behind when the adapter ends them. (Terminals go further: each runs
under a subreaper supervisor that ends its whole tree, whatever group a process moved to —
`crew/acp/reaper.py`, issue 42 items 6 and 7.)
"""

from __future__ import annotations

import os
import signal

import trio

from collie.crew.acp.reaper import processes

GROUP_POLL = 0.05  # how often a group is looked at until it is empty
GROUP_GRACE = 2.0


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Signal a whole process group; False when no process of it is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # the pgid was reused by someone else's process: not ours to signal
        return False
    return True


def group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (zombies waiting for a parent that does not reap them,
    e.g. a container's init, do not count: they hold no resources but a pid)."""
    if not kill_group(pgid, 0):
        return False
    try:
        return any(pgrp == pgid and state not in (b"Z", b"X") for _pid, state, _ppid, pgrp in processes())
    except OSError:
        return True


async def end_group(pgid: int, grace: float = GROUP_GRACE) -> None:
    """SIGKILL the group and wait (bounded) until none of its processes is left."""
    kill_group(pgid)
    with trio.move_on_after(grace):
        while group_alive(pgid):
            await trio.sleep(GROUP_POLL)
            kill_group(pgid)

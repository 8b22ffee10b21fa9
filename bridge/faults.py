"""Crash points for the fault tests: `COLLIE_CRASH_AT=after_begin:3` kills this process with SIGKILL
the third time the writer reaches `after_begin`. Unset (always, outside tests), it does nothing.

Points: `after_begin` (the request is on disk, nothing sent), `after_send` (the agent answered,
the outcome is not on disk), `after_finish` (the outcome is on disk, the phone has no receipt).
"""

from __future__ import annotations

import os
import signal

_spec = os.environ.get("COLLIE_CRASH_AT", "")
_point, _, _nth = _spec.partition(":")
_count = 0


def crashpoint(name: str) -> None:
    global _count
    if not _point or name != _point:
        return
    _count += 1
    if _count >= int(_nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)

"""A member's link as the lead holds it (crew.md §2): one WebSocket, its sends, its calls and its queue.

`send` never waits on a stalled member longer than its time limit: a link that takes no frame for
`SEND_WAIT` is ended and `LinkStuck` raised. `call` sends a request or read and waits for the answer
the reader task hands to `resolve`, within a limit counted from the call. View frames wait in `queue`
in arrival order for the hub's feeder (a newer small `agent` frame replaces a waiting one for the same
agent); `queued` counts their characters, so the hub stops reading a link that is too far ahead.
`receive_hello`, `answers` (the probe of an open link) and `close_link` are the link's other steps;
`feed` builds the readers for its queued view frames, off the loop.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import trio

from collie.crew import crewwire
from collie.crew.crewwire import FrameError
from collie.lead.members.session import FrameQueue, digest_inline
from collie.lead.members.views import digest, digest_text

FORWARD_TIMEOUT = 15.0  # the member's own write timeout (10 s) plus the link
SEND_WAIT = FORWARD_TIMEOUT  # a frame a member's link takes nothing of for this long ends the link
HELLO_TIMEOUT = 10.0
PING_WAIT = 5.0  # a link claimed by a new member process must answer a probe this fast to keep its label
PROBE_AGENT = "collie-link-probe"  # the read that probes a link names this agent (none has that name)


class LinkStuck(Exception):
    """A member's link took no frame for the send's time limit; the link is being ended."""


class Conn:
    def __init__(self, ws, label: str, boot: str | None) -> None:
        self.ws = ws
        self.label = label
        self.boot = boot
        self.send_lock = trio.Lock()
        self.pending: dict[str, tuple[trio.Event, list]] = {}
        self.closed = trio.Event()
        self.close_reason = "closed"
        self.last_frame = trio.current_time()
        self.bad_frames = 0
        self.names: set[str] = set()  # the member's agents, as its last snapshot (and agent frames) said
        # frames carrying views, in arrival order, waiting for the feeder: ("text", raw) for a large frame
        # (parsed in the worker), ("parsed", kind, frame) for a small one; `queued` counts their characters
        self.frames = FrameQueue()
        self.fresh = trio.Event()
        self.drained = trio.Event()
        self.save_after_feed = False

    async def send(self, msg, timeout: float = SEND_WAIT) -> None:
        """Send one frame (a crewwire lead frame, or its dict: checked against the model before it goes).
        A link that takes no frame for `timeout` (the member stopped reading its socket) is ended, and
        `LinkStuck` raised: nobody waits on it longer than that."""
        text = crewwire.encode(crewwire.lead_frame(msg))
        with trio.move_on_after(timeout) as scope:
            async with self.send_lock:
                await self.ws.send(text)
        if scope.cancelled_caught:
            if not self.closed.is_set():
                self.close_reason = f"stalled: it took no frame for {timeout:g} s"
                self.closed.set()
            raise LinkStuck(self.label)

    async def call(self, msg, timeout: float):
        """Send a request or read and wait for its answer: the parsed frame, a FrameError (the member
        answered with a bad frame), or None on timeout or a dropped link. `timeout` counts from the
        call, the frame's send included."""
        msg = crewwire.lead_frame(msg)
        done = trio.Event()
        slot: list = []
        self.pending[msg.id] = (done, slot)
        deadline = trio.current_time() + timeout
        try:
            await self.send(msg, timeout)
            with trio.move_on_at(deadline):
                async with trio.open_nursery() as n:
                    async def closed():
                        await self.closed.wait()
                        n.cancel_scope.cancel()
                    n.start_soon(closed)
                    await done.wait()
                    n.cancel_scope.cancel()
        except Exception:  # the socket went away while sending
            return None
        finally:
            self.pending.pop(msg.id, None)
        return slot[0] if slot else None

    def resolve(self, request_id: str, answer) -> None:
        entry = self.pending.get(request_id)
        if entry is not None and not entry[0].is_set():
            entry[1].append(answer)
            entry[0].set()

    @property
    def queue(self):
        """The view frames waiting for the feeder, oldest first (collie.lead.members.session.FrameQueue)."""
        return self.frames.entries

    @property
    def queued(self) -> int:
        return self.frames.size

    def enqueue(self, entry: tuple, size: int) -> None:
        self.frames.put(entry, size)
        self.fresh.set()

    def take(self) -> tuple:
        entry = self.frames.take()
        self.drained.set()
        return entry


async def close_link(ws, reason: str, code: int = 1008) -> None:
    """Close a link with a reason the member can show, within a second whatever the socket does."""
    with trio.move_on_after(1, shield=True):
        try:
            await ws.close(code, reason)
        except Exception:
            pass


async def receive_hello(ws) -> crewwire.Hello | None:
    """The link's first frame if it is a `hello` within HELLO_TIMEOUT, else None (closed `protocol`)."""
    with trio.move_on_after(HELLO_TIMEOUT):
        raw = await ws.receive()
        try:
            kind, frame = crewwire.parse_member_frame(raw)
        except FrameError:
            return None
        return frame if kind == "hello" else None
    return None


async def answers(conn: Conn) -> bool:
    """Does the open link answer within `PING_WAIT`? (A member restarted after a cut link: the lead may
    still hold its old link, which answers nothing.) ASGI gives the lead no WebSocket ping, so the
    probe is a read the member must answer (crew.md §2), of an agent no member has: any answer, even
    "no such agent" or a bad frame, means a live member at the other end."""
    probe = crewwire.Read(str(uuid.uuid4()), PROBE_AGENT, "recent_sends", {"conversation": "probe"})
    return await conn.call(probe, PING_WAIT) is not None


async def feed(conn: Conn, apply: Callable[[tuple], None], save: Callable[[], Awaitable[None]],
               bad_frame: Callable[[Conn, FrameError], None], current: Callable[[], bool],
               limiter: trio.CapacityLimiter) -> None:
    """Build the readers for the link's queued view frames, one frame at a time in arrival order (in a
    worker thread under `limiter`, but for a small view), and `apply` each while the link is `current`;
    once the queue is empty after a snapshot, `save` the views file."""
    while True:
        if not conn.queue:
            if conn.save_after_feed:
                conn.save_after_feed = False
                await save()
                continue  # a frame that came during the save set the event about to be replaced: look again
            conn.fresh = trio.Event()  # no await since the queue was found empty: no frame can slip by
            await conn.fresh.wait()
            continue
        entry = conn.take()
        try:
            if digest_inline(entry):  # a small view: a thread hop costs more
                got = digest(entry[1], entry[2], trio.current_time())
            elif entry[0] == "text":
                got = await trio.to_thread.run_sync(digest_text, entry[1], trio.current_time(), limiter=limiter)
            else:
                got = await trio.to_thread.run_sync(digest, entry[1], entry[2], trio.current_time(), limiter=limiter)
            if not current():
                return
            apply(got)
        except FrameError as exc:
            bad_frame(conn, exc)

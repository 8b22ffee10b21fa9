"""A request id runs once (features B2, B3; wire-v1 §1, §8; crew.md §3, §4): the one home of that rule.

Three places carry a phone's write under its request id — the bridge's writer (a local agent), the
lead's routing (a member's agent) and the lead's inbox (sends and starters) — and each keeps its own
record of what it did (the bridge's journal, the lead's refusals, the inbox's items). What they share
lives here:

- `InFlight`, the table of ids being carried out right now. An id is claimed before the first await
  that could let a second write of it in, so a double tap (or the inbox and the phone at once) never
  runs twice side by side: the second waits for the first (`claim`), or waits it out and then looks
  at what the first left (`wait_out`). The claim is let go on every way out — an answer, an error,
  a cancellation — and whoever waits is woken then.
- `judge_repeat`, what an id seen before answers: the same id with another body is refused
  `conflict` (nothing is done); an id whose record holds a final receipt answers it again
  (`replay: true`, so a request once refused is never performed later); else None, and the caller
  carries it out (or, for the inbox, reports the state its item is in).
- `not_recorded`, the receipt of a write that could not be recorded on disk before it was to be sent
  or forwarded (the state folder's disk is full): refused `disk_full` (`not_recorded` for any other
  cause), nothing sent, nothing kept — so a repeat of its id is judged afresh, as the refusal says.

No I/O here; `InFlight` is the only piece that touches trio (its events).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import attrs
import trio

from collie.bridge.writes import WriteRequest
from collie.crew.receipts import Reason, Receipt, is_disk_full, refused


class InFlight:
    """Request ids (or inbox item ids) being carried out, each with the event its finish sets."""

    def __init__(self) -> None:
        self._events: dict[str, trio.Event] = {}

    def __contains__(self, rid: object) -> bool:
        return rid in self._events

    def __len__(self) -> int:
        return len(self._events)

    def __iter__(self) -> Iterator[str]:
        return iter(self._events)

    async def wait_out(self, rid: str) -> bool:
        """Wait until `rid` is not in flight; True when it was (the caller looks again at what it left)."""
        waited = False
        while rid in self._events:
            waited = True
            await self._events[rid].wait()
        return waited

    @asynccontextmanager
    async def claim(self, rid: str) -> AsyncIterator[None]:
        """Hold `rid` for the block: a write of it already in flight is waited for first (a double tap),
        then the id is claimed with no checkpoint between, and let go however the block ends."""
        await self.wait_out(rid)
        with self.hold(rid):
            yield

    @contextmanager
    def hold(self, rid: str) -> Iterator[None]:
        """Claim `rid` now, without waiting; the caller has made sure it is free (`rid not in self`)."""
        if rid in self._events:
            raise RuntimeError(f"request {rid!r} is already in flight")
        done = self._events[rid] = trio.Event()
        try:
            yield
        finally:
            del self._events[rid]
            done.set()


def conflicts(recorded: str | None, fingerprint: str) -> bool:
    """The same request id with another body: `recorded` is the fingerprint it was first seen with
    (None: recorded without one, by an older Collie — never a conflict)."""
    return recorded is not None and recorded != fingerprint


def judge_repeat(req: WriteRequest, recorded: str | None, kept: dict | None, *,
                 fingerprint: str | None = None) -> Receipt | None:
    """A request id seen before, `recorded` with that fingerprint, `kept`: the final receipt its record
    holds (None: none yet). Another body is refused `conflict`; a final receipt is answered again
    (`replay`); None: carry it out. `fingerprint`: this request's, when not `req.fingerprint()`."""
    if conflicts(recorded, req.fingerprint() if fingerprint is None else fingerprint):
        return refused(req.request_id, req.op, Reason.CONFLICT)
    if kept is not None:
        return attrs.evolve(Receipt(**kept), replay=True)
    return None


def not_recorded(req: WriteRequest, exc: BaseException) -> Receipt:
    """`req` could not be recorded on disk (`exc`) before it was to be sent: refused `disk_full` when
    the state folder's disk is full, else `not_recorded` naming the error; nothing was sent (wire §8).
    An answer's refusal keeps its channel and digest (B5)."""
    answer = req.op == "answer"
    kw = {"channel": "program" if answer else None, "digest": req.digest if answer else None}
    if is_disk_full(exc):
        return refused(req.request_id, req.op, Reason.DISK_FULL, **kw)
    return refused(req.request_id, req.op, Reason.NOT_RECORDED, type(exc).__name__, **kw)

"""Routing a phone's reads and writes to a member's agent, under the lead's lock (crew.md §3).

- Writes: one lock per session on the lead (collie.bridge.locks: busy at once, Stop waits 10 s then goes
  through); the request is forwarded once; no receipt within the limit → `unknown` (the member's own
  journal makes a resend of the same id safe). Session-bound writes to an offline member fail fast with
  `machine_offline`; sends and starters go to the inbox (collie.lead.inbox.service). A session-bound write the lead
  refuses itself (busy, offline, older Collie) is remembered (collie.lead.members.refusals): a repeat of its id
  answers that refusal with `replay: true`, as the member's journal would.
- Reads: an answer is checked against the crew wire (counts first, collie.crew.crewwire); a member's chat items
  never bring their own `html` to the phone — the lead renders their Markdown itself (C1).

The decisions are plain functions (no trio, no I/O): `judge_repeat` (a repeated id, by collie.bridge.once's rule, which
also holds the in-flight table and the `disk_full` receipt shared with the bridge and the inbox), `refusal_before_forward`
(what the lead refuses itself), `forwarded_receipt` (the receipt a member's answer makes: only one for this
id and op is believed, anything else is `unknown`), `read_answer` (a read's answer, checked). `Routing`
holds the lock and the refusals' store and carries them out.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable

import attrs
import trio

from collie.bridge import once
from collie.bridge.locks import Busy, SessionLocks
from collie.bridge.once import InFlight, not_recorded
from collie.bridge.panes import chat_items
from collie.bridge.writer import INBOX_OPS
from collie.bridge.writes import WriteRequest, lock_key
from collie.crew import crewwire, logs
from collie.crew.crewwire import FrameError, shown
from collie.crew.receipts import NOT_CERTAIN, NOT_CONFIRMED, OLDER_COLLIE, Reason, Receipt, refused
from collie.lead.members.link import FORWARD_TIMEOUT, Conn
from collie.lead.members.refusals import Refusals, Seen
from collie.lead.members.session import Member, hhmm

log = logs.get("crew")

READ_TIMEOUT = 12.0
RENDER_INLINE = 16 * 1024  # characters of a member's item text rendered on the loop; more in a worker thread


def own_html(items: list) -> list:
    """A member's chat items with the lead's own rendering of their Markdown (C1): the `html` a member
    sent is never passed on — the phone puts it into the page as markup."""
    out = []
    for item in items:
        if isinstance(item, dict) and "html" in item:
            item = {k: v for k, v in item.items() if k != "html"}
        if isinstance(item, dict) and item.get("kind") == "markdown":
            item = chat_items([item], set())[0]
        out.append(item)
    return out


def offline_text(member: Member) -> str:
    """`since HH:MM` (the member's last frame), or `(never connected)`."""
    since = member.offline_since or member.last_seen
    return f"since {hhmm(since)}" if since else "(never connected)"


def judge_repeat(seen: Seen | None, req: WriteRequest) -> Receipt | None:
    """A session-bound write whose id the lead has seen, judged as the bridge judges its journal's
    (`collie.bridge.once.judge_repeat`): the same id with another body is refused `conflict`; one the lead refused
    itself answers that refusal again (`replay`); None: route it (a forwarded one is the member's to answer)."""
    if seen is None:
        return None
    return once.judge_repeat(req, seen.fingerprint, seen.receipt if seen.state == "refused" else None)


def refusal_before_forward(label: str, member: Member, req: WriteRequest) -> Receipt | None:
    """What the lead refuses without asking the member: an older Collie (read-only) `older_collie`, a
    member offline `machine_offline` with since when; None: take the lock and forward."""
    if member.read_only:
        return Receipt(request_id=req.request_id, op=req.op, outcome="refused", reason=Reason.OLDER_COLLIE,
                       text=OLDER_COLLIE)
    if member.conn is None:
        return refused(req.request_id, req.op, Reason.MACHINE_OFFLINE, f"{label} {offline_text(member)}")
    return None


def forwarded_receipt(req: WriteRequest, got) -> tuple[Receipt, FrameError | None]:
    """The receipt of a forwarded request from what its call returned (a receipt frame, a FrameError, or
    None), and the bad frame to count when the member answered for another request. Anything but this
    id's and op's receipt is `unknown` (B3): `protocol` for a bad answer, `link` for none in time."""
    bad = None
    if isinstance(got, crewwire.ReceiptFrame):
        rec = got.receipt
        if rec.request_id == req.request_id and rec.op == req.op:
            return rec, None
        bad = got = FrameError(f"receipt: for {shown(rec.request_id, 40)}/{shown(rec.op, 12)}, "
                               f"not the request {req.request_id}/{req.op}")
    return Receipt(request_id=req.request_id, op=req.op, outcome="unknown",
                   reason="protocol" if isinstance(got, FrameError) else "link",
                   text=NOT_CERTAIN if req.op == "answer" else NOT_CONFIRMED), bad


def read_answer(what: str, got) -> tuple[dict | None, FrameError | None]:
    """A read's result from what its call returned, checked against the crew wire (counts first); None when
    there is none, with the bad frame to count when the answer does not fit."""
    if not isinstance(got, crewwire.ReadResult) or not got.ok:
        return None, None
    try:
        return crewwire.unstructure(crewwire.parse_read_result(what, got.result)), None
    except FrameError as exc:
        return None, exc


class Routing:
    """The lead's reads and writes to members' agents: `members` is the hub's own table; `bad_frame(conn,
    exc)` is told of an answer that does not fit the crew wire."""

    def __init__(self, members: dict[str, Member], refusals: Refusals,
                 bad_frame: Callable[[Conn, FrameError], None]) -> None:
        self.members = members
        self.locks = SessionLocks()
        # the lead's own refusals of writes to members' agents, remembered (collie.lead.members.refusals)
        self.refusals = refusals
        self.inflight = InFlight()  # request ids being judged or forwarded (session-bound writes; collie.bridge.once)
        self.render_limiter = trio.CapacityLimiter(1)  # members' items rendered off the loop, one answer at a time
        self._bad_frame = bad_frame

    async def read(self, label: str, agent: str, what: str, args: dict) -> dict | None:
        """A read through to the member (`items`, `closed`, `recent_sends`); None when it has no answer."""
        member = self.members.get(label)
        if member is None or member.conn is None:
            return None
        conn = member.conn
        got = await conn.call({"type": "read", "id": str(uuid.uuid4()), "agent": agent, "what": what,
                               "args": args}, READ_TIMEOUT)
        result, bad = read_answer(what, got)
        if bad is not None:
            self._bad_frame(conn, bad)
        if result is None:
            return None
        if what == "items":  # C1: the phone shows `html` as markup; only the lead's own rendering is shown
            size = sum(len(i.get("text") or "") for i in result["items"] if isinstance(i.get("text"), str))
            if size <= RENDER_INLINE:
                result["items"] = own_html(result["items"])
            else:
                result["items"] = await trio.to_thread.run_sync(own_html, result["items"], limiter=self.render_limiter)
        return result

    async def write(self, label: str, req: WriteRequest) -> Receipt:
        """Route one write to a member's agent. A session-bound write the lead refuses before forwarding
        (busy, offline, older Collie) is remembered, so a repeat of its id answers that refusal (`replay`)
        and never runs later; sends and starters are the inbox's (collie.lead.members.refusals)."""
        member = self.members.get(label)
        if member is None:
            return refused(req.request_id, req.op, Reason.NOT_FOUND, f"no machine {label!r} in this crew")
        if req.op in INBOX_OPS:
            return await self._route(label, member, req, kept=False)
        async with self.inflight.claim(req.request_id):  # a double tap waits for the first, then is judged
            try:
                seen = await self.refusals.run(self.refusals.get, req.request_id)
            except (sqlite3.Error, OSError) as exc:
                return not_recorded(req, exc)
            rec = judge_repeat(seen, req)
            if rec is not None:
                return rec
            return await self._route(label, member, req, kept=seen is None)

    async def _route(self, label: str, member: Member, req: WriteRequest, *, kept: bool) -> Receipt:
        """`kept`: remember a refusal decided here, and mark the request forwarded before it goes out."""
        rec = refusal_before_forward(label, member, req)
        if rec is not None:
            return await self._keep(req, rec) if kept else rec
        reader = member.readers.get(req.agent)
        key = lock_key(req, reader.conversations if reader is not None else {})  # an answer: its ask's conversation
        try:
            async with self.locks.hold((label, *key), stop=req.op == "abort"):
                if kept:
                    try:  # on disk before the frame goes out: a later refusal of this id is then not kept
                        await self.refusals.run(self.refusals.forwarded, req.request_id, req.fingerprint())
                    except (sqlite3.Error, OSError) as exc:
                        log.warning("[crew] %s: %s %s: not recorded (%s: %s); refused, nothing was forwarded",
                                    label, req.op, req.request_id, type(exc).__name__, exc)
                        return not_recorded(req, exc)
                return await self.forward(label, req)
        except Busy:
            rec = refused(req.request_id, req.op, Reason.BUSY)
            return await self._keep(req, rec) if kept else rec

    async def _keep(self, req: WriteRequest, rec: Receipt) -> Receipt:
        """Remember a refusal decided before forwarding. When it cannot be written (the disk is full) the
        write is refused `disk_full` instead — nothing was forwarded, nothing is kept, so a repeat of the
        id is judged afresh, as that refusal says."""
        try:
            await self.refusals.run(self.refusals.refuse, req.request_id, req.fingerprint(), attrs.asdict(rec))
        except (sqlite3.Error, OSError) as exc:
            log.warning("[crew] %s %s: the refusal %s could not be recorded (%s: %s)", req.op, req.request_id,
                        rec.reason, type(exc).__name__, exc)
            return not_recorded(req, exc)
        return rec

    async def forward(self, label: str, req: WriteRequest) -> Receipt:
        """Send one request to the member (the caller holds the session lock)."""
        member = self.members.get(label)
        if member is None or member.conn is None:
            return refused(req.request_id, req.op, Reason.MACHINE_OFFLINE,
                           f"{label} {offline_text(member) if member else ''}")
        conn = member.conn
        got = await conn.call({"type": "request", "id": req.request_id, "agent": req.agent, "op": req.op,
                               "args": attrs.asdict(req)}, FORWARD_TIMEOUT)
        rec, bad = forwarded_receipt(req, got)  # no answer in time, or one that does not fit: `unknown` (B3)
        if bad is not None:
            self._bad_frame(conn, bad)
        return rec

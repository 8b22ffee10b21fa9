"""Carrying the phone's writes to an agent: the lock, the journal, the socket (features B2–B9).

For one write, in order:
1. A request id seen before answers with its stored receipt (`replay`); the same id with another
   body is a `conflict`; a request still in flight is waited for, never sent twice at once
   (`collie.bridge.once`: the in-flight table and the repeat judgement, shared with the lead).
2. The session lock (one per conversation, B7; an answer takes its ask's conversation's lock):
   any write while another holds it is refused `busy` at once — except Stop, which waits up to 10 s
   (`collie.bridge.locks`) and then goes through anyway. The lock is held until the agent answered.
3. `plan()` judges the write against a fresh view of the agent; a refusal reaches nothing. Right
   after the agent (re)started its capabilities are not known until its hello is read again: the
   writer says hello itself first (bounded), and if the agent still has not answered it the write
   is refused `unreachable` (not ready), never `unsupported` (W3, W4).
4. The request is written to the journal (fsync'd) *before* anything is sent. When that cannot be
   done (the state folder's disk is full) the write is refused `disk_full` (`collie.bridge.once.not_recorded`):
   nothing is sent.
5. It is sent once, within a total deadline. No answer → `unknown`; nothing was sent (connection
   refused, the socket's listener is another user) → refused `unreachable`; the agent answered with an error code → `writes.error_receipt` (a
   refusal with its own reason where the agent did nothing, `unknown` where that is not known).
   The outcome goes to the journal, then to the phone.

A retry (same request id after `unknown`, or recovery at start) resends exactly the recorded wire
body under the same id; the agent's own journal makes that safe. Recovery at start first looks for
the `user` item naming the request id (the send was applied) before resending anything.

Refusals are receipts too (B2, phone-api.md): a session-bound write (answer, steer, stop, action,
rename, close, reopen) refused before sending is journaled with its refusal, so a repeat of its id
answers that refusal (`replay`) and is never performed later. Sends and starters belong to the inbox
(I1), which keeps their receipts — a refused one ends `failed` there, or waits and is dispatched
again under the same id when the refusal only said "not now" (`busy`, `unreachable`, …) — so the
writer keeps no refusal of theirs.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

import attrs
import trio

from collie.bridge.bridge import Bridge
from collie.bridge.client import AgentRefused, AgentUnreachable
from collie.bridge.faults import crashpoint
from collie.bridge.journal import Journal, Row
from collie.bridge.locks import Busy, SessionLocks
from collie.bridge.once import InFlight, judge_repeat, not_recorded
from collie.bridge.writes import (AgentFacts, Call, RecentSends, WriteRequest, error_receipt, find_ask, lock_key,
                                  plan, receipt)
from collie.crew import logs
from collie.crew.receipts import NOT_CERTAIN, NOT_CONFIRMED, Reason, Receipt, refused
from collie.crew.views import READY, VERSION_MISMATCH
from collie.crew.wire import TEXT_MAX_DEFAULT

log = logs.get("writes")

WRITE_TIMEOUT = 10.0
FRESH_WITHIN = 1.0  # re-read the agent before a write when the view is older than this
RECOVER_EVERY = 5.0
# failures before a byte of the request was written
NOT_DELIVERED = {"connection-refused", "no-socket", "socket-not-private", "bad-socket-path", "peer-not-you", "tls",
                 "config"}
# agent error answers after which the request stays open in the journal (Retry and recovery resend it)
RESEND_AFTER = {"internal", "unauthorized", "version"}
INBOX_OPS = ("send", "starter")  # their receipts are the inbox's to keep (I1)
HELLO_WAIT = 5.0  # a write finding the agent not greeted (it just restarted) says hello first, this long at most


class Writer:
    def __init__(self, bridge: Bridge, journal: Journal, *, wall: Callable[[], float] = time.time) -> None:
        self.bridge = bridge
        self.journal = journal
        self.wall = wall
        self.locks = SessionLocks()
        self.inflight = InFlight()  # request ids being carried out (collie.bridge.once)
        self.recent: dict[tuple[str, str], RecentSends] = {}
        self.counts: dict[str, int] = {}
        # Staleness, per conversation: each write that reached an agent gets the agent's next number;
        # a state read started when the agent's number was n covers every write numbered <= n.
        self.counter: dict[str, int] = {}  # agent -> writes that reached it
        self.last_change: dict[tuple[str, str], int] = {}  # session -> number of its last write
        self.read_gen: dict[str, int] = {}  # agent -> the number the last fresh read covers
        self.reading: dict[str, tuple[int, trio.Event]] = {}  # agent -> a fresh read in flight, its number
        self.turn_after: dict[tuple[str, str], tuple[str, int]] = {}  # session -> (conversation, turn) its last send started

    # --- facts --------------------------------------------------------------------------------
    def facts(self, agent: str, answered: frozenset[str] = frozenset()) -> AgentFacts:
        reader = self.bridge.readers[agent]
        hello = reader.hello
        return AgentFacts(caps=tuple(hello.caps) if hello else None, text_max=hello.limits.text_max if hello else TEXT_MAX_DEFAULT,
                          conversations=dict(reader.conversations), starters=tuple(reader.starters),
                          answered_asks=answered)

    async def _fresh(self, agent: str, session: tuple[str, str]) -> None:
        """Make sure the view covers every write made so far to this conversation (single-flight:
        concurrent writers share one read, but only a read that started after their last change)."""
        reader = self.bridge.readers[agent]
        poller = self.bridge.pollers.get(agent)
        if poller is None or reader.status != READY:
            return
        need = self.last_change.get(session, 0)
        recent = reader.last_ok is not None and trio.current_time() - reader.last_ok <= FRESH_WITHIN
        if self.read_gen.get(agent, 0) >= need and recent:
            return
        shown = self.turn_after.get(session)
        if recent and shown is not None and not reader.needs_hello():  # the last write was a send that
            conv = reader.conversations.get(shown[0])  # started turn n: a view showing turn n or later was
            if conv is not None and conv.turn is not None and conv.turn >= shown[1]:  # read after it (issue
                return  # 15.1); an agent that restarted and whose hello is not read yet is read as before
        inflight = self.reading.get(agent)
        if inflight is not None and inflight[0] >= need:
            await inflight[1].wait()
            return
        done = trio.Event()
        start = self.counter.get(agent, 0)
        self.reading[agent] = (start, done)
        try:
            await poller.read_now()
            self.read_gen[agent] = max(self.read_gen.get(agent, 0), start)
        except AgentUnreachable:
            pass
        finally:
            if self.reading.get(agent, (None, None))[1] is done:
                del self.reading[agent]
            done.set()

    async def _greet(self, agent: str) -> AgentUnreachable | None:
        """W3: the agent's hello is not read (the bridge is starting, or a state read just showed a new
        instance): say hello now instead of waiting for the poller, then read the state it left unread."""
        reader = self.bridge.readers[agent]
        poller = self.bridge.pollers.get(agent)
        if reader.hello is not None or reader.status == VERSION_MISMATCH:
            return None
        if poller is None:  # not reached at all (a broken entry): say why, not "starting"
            return AgentUnreachable(reader.reason or "config", reader.detail or "this agent is not being reached")
        with trio.move_on_after(HELLO_WAIT):
            try:
                await poller.hello_now()
                if reader.hello is not None and reader.status != VERSION_MISMATCH:
                    await poller.read_now()
            except AgentUnreachable as exc:
                log.info("[durable] %s: a write found the agent not ready: %s", agent, exc.reason)
                return exc
        return None

    async def _keep_refusal(self, req: WriteRequest, rec: Receipt) -> Receipt:
        """Journal a refusal decided before anything was sent, so a repeat of the id answers it (not
        for sends and starters: the inbox keeps theirs). When it cannot be journaled (the disk is full)
        the write is refused `disk_full` instead: nothing was sent and nothing is remembered, so a repeat
        is judged afresh — as that refusal says, and as the lead does for a member's agent."""
        if req.op in INBOX_OPS or rec.replay:
            return rec
        row = Row(request_id=req.request_id, agent=req.agent, op=req.op,
                  target=req.conversation or req.ask_id or req.starter_id, fingerprint=req.fingerprint(),
                  wire_path="", wire_body={}, ask_id=None, state="done", receipt=_plain(rec), attempts=0,
                  created_at=self.wall())
        try:
            await self.journal.run(self.journal.refusal, row, self.wall())
        except (sqlite3.Error, OSError) as exc:
            log.warning("[durable] %s: %s %s: the refusal %s could not be journaled (%s: %s); refused, nothing "
                        "was sent", req.agent, req.op, req.request_id, rec.reason, type(exc).__name__, exc)
            return not_recorded(req, exc)
        return rec

    async def _record(self, req: WriteRequest, fn, *args) -> bool:
        """A journal update after the decision was made (an outcome, a refusal): a failure (the disk
        is full) is logged and contained — the row, if any, stays open, so a repeat or the recovery
        asks the agent again under the same id."""
        try:
            await self.journal.run(fn, *args)
            return True
        except (sqlite3.Error, OSError) as exc:
            log.warning("[durable] %s: %s %s: could not update the journal (%s: %s); the request stays open",
                        req.agent, req.op, req.request_id, type(exc).__name__, exc)
            return False

    def _count(self, rec: Receipt) -> Receipt:
        self.counts[rec.outcome] = self.counts.get(rec.outcome, 0) + 1
        return rec

    # --- the one entry point ------------------------------------------------------------------
    def lock_key(self, req: WriteRequest) -> tuple[str, str]:
        return lock_key(req, self.bridge.readers[req.agent].conversations)

    async def write(self, req: WriteRequest, *, caller_locked: bool = False) -> Receipt:
        """Carry one write. `caller_locked`: the caller (the lead, for a member) already holds the
        session's lock; this bridge takes its own too (a write the lead gave up waiting for may still
        be in flight here), but a Stop does not wait for it a second time."""
        if req.agent not in self.bridge.readers:
            return refused(req.request_id, req.op, Reason.NOT_FOUND, f"no durable agent named {req.agent!r}")
        # a double tap waits for the first, then is judged as a repeat (the id is claimed before any await)
        async with self.inflight.claim(req.request_id):
            try:
                row = await self.journal.run(self.journal.get, req.request_id)
                if row is not None:
                    again = judge_repeat(req, row.fingerprint, row.receipt if row.state == "done" else None)
                    if again is not None:  # a conflict is counted, a replay was counted the first time
                        return again if again.replay else self._count(again)
                key = self.lock_key(req)
                async with self.locks.hold(key, stop=req.op == "abort", wait=0 if caller_locked else None) as held:
                    if not held:
                        log.info("[durable] %s: stop found a write in %s under way; sending it anyway", req.agent,
                                 req.conversation)
                    if row is not None:  # pending or unknown: a retry of the very same request
                        return self._count(await self._send(req, row.wire_path, row.wire_body, retry=True, key=key))
                    return self._count(await self._first(req, key))
            except Busy:
                return self._count(await self._keep_refusal(req, refused(req.request_id, req.op, Reason.BUSY)))

    async def _first(self, req: WriteRequest, key: tuple[str, str]) -> Receipt:
        reader = self.bridge.readers[req.agent]
        down = None
        if reader.status != VERSION_MISMATCH:
            await self._fresh(req.agent, key)
            down = await self._greet(req.agent)
        if reader.status == VERSION_MISMATCH:
            return await self._keep_refusal(req, refused(req.request_id, req.op, Reason.VERSION, reader.detail))
        answered = frozenset()
        if req.op == "answer" and req.ask_id:
            if await self.journal.run(self.journal.accepted_answer, req.agent, req.ask_id):
                answered = frozenset({req.ask_id})
        if reader.hello is None and down is not None:  # not ready, and we know why (plan() would say "starting")
            decision: Receipt | Call = refused(req.request_id, req.op, Reason.UNREACHABLE, down.detail)
        else:  # an inbox send quoting "the current turn" quotes it now, from the fresh view (crew.md §3)
            facts = self.facts(req.agent, answered)
            decision = plan(req.quoting(facts.conversations), facts)
        if isinstance(decision, Receipt):
            if req.op == "send":
                self._recent(req).add(req.request_id, req.text or "", "refused", trio.current_time())
            return await self._keep_refusal(req, decision)
        row = Row(request_id=req.request_id, agent=req.agent, op=req.op,
                  target=req.conversation or req.ask_id or req.starter_id, fingerprint=req.fingerprint(),
                  wire_path=decision.path, wire_body=decision.body, ask_id=req.ask_id if req.op == "answer" else None,
                  state="pending", receipt=None, attempts=0, created_at=self.wall())
        try:
            existing = await self.journal.run(self.journal.begin, row, self.wall())
        except (sqlite3.Error, OSError) as exc:  # not on disk: nothing may be sent (wire §8)
            log.warning("[durable] %s: %s %s: not recorded (%s: %s); refused, nothing was sent", req.agent, req.op,
                        req.request_id, type(exc).__name__, exc)
            return not_recorded(req, exc)
        if existing is not None:  # recorded between our look and now (cannot happen under the lock, but be sure)
            return await self._send(req, existing.wire_path, existing.wire_body, retry=True, key=key)
        crashpoint("after_begin")
        return await self._send(req, decision.path, decision.body, retry=False, key=key)

    async def _send(self, req: WriteRequest, path: str, body: dict, *, retry: bool, key: tuple[str, str]) -> Receipt:
        rid = req.request_id
        poller = self.bridge.pollers.get(req.agent)
        if retry:  # a first attempt was counted when the row was written
            await self._record(req, self.journal.attempt, rid, self.wall())
        sent_at = trio.current_time()  # C4: the agent's copy of a send may be read before its receipt is in
        try:
            if poller is None or poller.client is None:
                raise AgentUnreachable("config", "this agent is not being reached")
            answer = await poller.client.request("POST", path, json_body=body, timeout=WRITE_TIMEOUT)
        except AgentRefused as exc:  # the agent answered, with an error code (wire §1)
            rec = error_receipt(req, exc.reason, exc.detail, retry=retry)
            if rec.outcome == "unknown" and exc.reason in RESEND_AFTER:
                await self._record(req, self.journal.unknown, rid, _plain(rec), self.wall())
            else:
                await self._record(req, self.journal.finish, rid, _plain(rec), self.wall())
            log.info("[durable] %s: %s %s: the agent answered %s: %s", req.agent, req.op, rid, exc.reason, rec.outcome)
            self._after(req, rec, key, sent_at)
            return rec
        except AgentUnreachable as exc:
            forgotten = False
            if exc.reason in NOT_DELIVERED and not retry and req.op in INBOX_OPS:
                # reached nothing: the inbox keeps it and dispatches it again later. Were the row to stay
                # (the disk is full), the recovery would resend it: then it is `unknown`, resumed as recorded.
                forgotten = await self._record(req, self.journal.forget, rid)
            if exc.reason in NOT_DELIVERED and not retry and (forgotten or req.op not in INBOX_OPS):
                rec = refused(rid, req.op, Reason.UNREACHABLE, exc.detail)
                if not forgotten:
                    await self._record(req, self.journal.finish, rid, _plain(rec), self.wall())
            else:
                rec = Receipt(request_id=rid, op=req.op, outcome="unknown", reason=exc.reason,
                              text=NOT_CERTAIN if req.op == "answer" else NOT_CONFIRMED,
                              channel="program" if req.op == "answer" else None, digest=req.digest)
                await self._record(req, self.journal.unknown, rid, _plain(rec), self.wall())
            self._after(req, rec, key, sent_at)
            return rec
        crashpoint("after_send")
        rec = receipt(req, answer.body if isinstance(answer.body, dict) else {}, retry=retry)
        if rec.reason == "protocol" and rec.outcome == "unknown":
            log.warning("[durable] %s: %s %s: the agent's answer does not fit wire v1 (%s); what it did is not known",
                        req.agent, req.op, rid, str(answer.body)[:200])
        await self._record(req, self.journal.finish, rid, _plain(rec), self.wall())
        crashpoint("after_finish")
        self._after(req, rec, key, sent_at)
        if rec.outcome == "changed" and rec.current_ask is None:
            rec = await self._with_current_ask(req, rec)
        return rec

    async def _with_current_ask(self, req: WriteRequest, rec: Receipt) -> Receipt:
        """The agent found the ask changed (wire §4: its check closes the race with ours): read its
        state once and give the phone the ask as it stands now (`current_ask`), as a bridge-side
        `changed` does. Not kept in the journal: a repeat shows whatever it is by then."""
        poller = self.bridge.pollers.get(req.agent)
        try:
            if poller is not None:
                await poller.read_now()
        except AgentUnreachable:
            return rec
        found = find_ask(self.facts(req.agent), req.ask_id or "")
        if found is None or found[1].digest == req.digest:
            return rec
        return attrs.evolve(rec, current_ask=attrs.asdict(found[1]))

    def _recent(self, req: WriteRequest) -> RecentSends:
        key = (req.agent, req.conversation or "")
        if key not in self.recent:
            self.recent[key] = RecentSends()
        return self.recent[key]

    def _after(self, req: WriteRequest, rec: Receipt, key: tuple[str, str], sent_at: float | None = None) -> None:
        n = self.counter[req.agent] = self.counter.get(req.agent, 0) + 1
        self.last_change[key] = n  # views of this conversation read before now are stale
        if req.op == "send" and rec.outcome == "sent" and rec.turn is not None and req.conversation:
            self.turn_after[key] = (req.conversation, rec.turn)  # ... unless they show this turn
        else:
            self.turn_after.pop(key, None)
        if req.op == "send":
            shown = rec.outcome if rec.outcome in ("sent", "queued", "unknown") else "refused"
            self._recent(req).add(req.request_id, req.text or "", shown,
                                  sent_at if sent_at is not None else trio.current_time())
        poller = self.bridge.pollers.get(req.agent)
        if poller is not None:
            poller.poke()  # read the agent's new state now

    # --- recovery after a crash -----------------------------------------------------------------
    async def recover(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Forever: resolve every request left without an outcome (a crash, or `unknown`) and not in
        flight — by the agent's items, else by resending it under its own request id."""
        task_status.started()
        clean_at = None  # the journal's call count after a look that found no open row
        while True:
            if self.journal.calls != clean_at:  # idle, nothing was journaled: no thread hop, no read
                ours = self.journal.calls + 1  # the count once this look is made (no checkpoint between)
                rows = await self.journal.run(self.journal.open_rows)
                clean_at = None if rows else ours  # a call made meanwhile counts, and is looked at next time
                for row in rows:
                    if row.request_id in self.inflight or row.agent not in self.bridge.readers:
                        continue
                    if self.bridge.status(row.agent).status != READY:
                        continue
                    await self._recover_row(row)
            await trio.sleep(RECOVER_EVERY)

    async def _recover_row(self, row: Row) -> None:
        req = WriteRequest(request_id=row.request_id, op=row.op, agent=row.agent,
                           conversation=row.target if row.op not in ("answer", "starter") else None,
                           text=row.wire_body.get("text"), turn=row.wire_body.get("turn"),
                           ask_id=row.ask_id, digest=row.wire_body.get("digest"))
        if row.op == "send":
            for item in self.bridge.items(row.agent, row.target or ""):
                if item.get("kind") == "user" and item.get("request_id") == row.request_id:
                    rec = Receipt(request_id=row.request_id, op="send", outcome="sent", turn=item.get("turn"))
                    if not await self._record(req, self.journal.finish, row.request_id, _plain(rec), self.wall()):
                        return
                    log.info("[durable] %s: request %s was applied before the restart (found its user item)",
                             row.agent, row.request_id)
                    return
        key = self.lock_key(req)
        if self.locks.locked(key) or row.request_id in self.inflight:
            return  # a phone write holds the session: try again at the next pass
        with self.inflight.hold(row.request_id):
            async with self.locks.hold(key):
                rec = await self._send(req, row.wire_path, row.wire_body, retry=True, key=key)
        log.info("[durable] %s: request %s resolved after the restart: %s", row.agent, row.request_id, rec.outcome)

    # --- reading back -------------------------------------------------------------------------
    def recent_sends(self, agent: str, conversation: str) -> list[dict]:
        lines = self.recent.get((agent, conversation))
        if lines is None:
            return []
        reader = self.bridge.readers[agent]
        now = trio.current_time()
        conv = reader.conversations.get(conversation)
        if conv is None or conv.state != "working":
            lines.turn_ended(now)  # a queued send's 10-minute clock starts when its turn ends (C4)
        log_ = reader.logs.get(conversation)
        if log_ is not None:
            lines.observe(list(log_.items.values()), log_.seen)
        out = lines.visible(now)
        lines.prune(now)
        return out

    async def statistics(self) -> dict:
        stored = await self.journal.run(self.journal.counts)
        return {"journal": stored, "this_run": dict(self.counts)}


def _plain(rec: Receipt) -> dict:
    return attrs.asdict(rec)


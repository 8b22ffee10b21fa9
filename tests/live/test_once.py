"""A request id runs once (collie.bridge.once, features B2/B3, wire-v1 §1 and §8, crew.md §3-§4): the in-flight
table, the repeat judgement and the `disk_full` receipt that the bridge's writer, the lead's routing and the
inbox share. On trio's virtual clock: exact times, no real sleeps."""

from __future__ import annotations

import errno
import sqlite3

import attrs
import pytest
import trio

from collie.bridge.once import InFlight, conflicts, judge_repeat, not_recorded
from collie.bridge.writes import WriteRequest
from collie.crew.receipts import REASONS, Reason, refused


def req(text: str = "go", op: str = "steer", rid: str = "r1") -> WriteRequest:
    return WriteRequest(request_id=rid, op=op, agent="a", conversation="c00", text=text, turn=3)


class Carrier:
    """The shape the writer and routing have: claim the id, look it up, judge a repeat, else do the
    work (taking `work_for` virtual seconds) and record its final receipt."""

    def __init__(self, work_for: float = 1.0) -> None:
        self.inflight = InFlight()
        self.record: dict[str, tuple[str, dict]] = {}
        self.done: list[str] = []
        self.work_for = work_for

    async def write(self, r: WriteRequest):
        async with self.inflight.claim(r.request_id):
            seen = self.record.get(r.request_id)
            if seen is not None:
                again = judge_repeat(r, seen[0], seen[1])
                if again is not None:
                    return again
            await trio.sleep(self.work_for)
            self.done.append(r.request_id)
            rec = refused(r.request_id, r.op, Reason.BUSY)  # any final receipt
            self.record[r.request_id] = (r.fingerprint(), attrs.asdict(rec))
            return rec


async def test_a_double_tap_waits_for_the_first_and_is_answered_its_receipt_as_a_replay(autojump_clock):
    """Two writes of one id at once: the work is done once; the second waits until the first ends
    (t = 1.0 exactly) and answers the first's receipt with `replay: true`; nothing stays in flight."""
    c = Carrier(work_for=1.0)
    got: list[tuple[float, object]] = []

    async def one():
        rec = await c.write(req())
        got.append((trio.current_time(), rec))

    async with trio.open_nursery() as n:
        n.start_soon(one)
        n.start_soon(one)
    assert c.done == ["r1"]
    assert [(t, r.reason, r.replay) for t, r in got] == [(1.0, "busy", False), (1.0, "busy", True)]
    assert len(c.inflight) == 0 and "r1" not in c.inflight


async def test_the_same_id_with_another_body_is_a_conflict_and_does_nothing(autojump_clock):
    """B2: the same request id with another body is refused `conflict` at once (no wait, no work), and is
    not a replay; a record without a fingerprint (an older Collie's) never conflicts."""
    c = Carrier()
    await c.write(req("go"))
    start = trio.current_time()
    other = await c.write(req("something else"))
    assert (other.outcome, other.reason, other.replay, trio.current_time() - start) == ("refused", "conflict",
                                                                                         False, 0.0)
    assert other.text == REASONS[Reason.CONFLICT] and c.done == ["r1"]
    assert not conflicts(None, req().fingerprint()) and conflicts("x", req().fingerprint())
    # the inbox's fingerprint is its own (machine-scoped): the judgement takes it as given
    assert judge_repeat(req(), "fp-1", None, fingerprint="fp-1") is None
    assert judge_repeat(req(), "fp-1", None, fingerprint="fp-2").reason == Reason.CONFLICT


async def test_a_double_tap_while_the_first_conflicts_on_the_record_is_judged_after_it(autojump_clock):
    """A second write of an id still in flight is judged only once the first ended, against what the
    first recorded: another body then is a `conflict`, not a second run."""
    c = Carrier(work_for=2.0)
    got = {}

    async def first():
        got["first"] = await c.write(req("go"))

    async def second():
        got["second"] = (await c.write(req("changed")), trio.current_time())

    async with trio.open_nursery() as n:
        n.start_soon(first)
        await trio.sleep(0.5)
        n.start_soon(second)
    assert c.done == ["r1"]
    assert (got["second"][0].reason, got["second"][1]) == ("conflict", 2.0)


async def test_the_claim_is_let_go_when_the_work_raises_and_the_waiter_runs(autojump_clock):
    """An error inside the claim lets the id go: the write that waited on it is woken at that moment
    (t = 0.5) and carries it out itself, once."""
    table = InFlight()
    ran: list[float] = []

    async def failing():
        with pytest.raises(RuntimeError):
            async with table.claim("r1"):
                await trio.sleep(0.5)
                raise RuntimeError("the agent's socket broke")

    async def waiting():
        await trio.sleep(0.1)
        async with table.claim("r1"):
            ran.append(trio.current_time())

    async with trio.open_nursery() as n:
        n.start_soon(failing)
        n.start_soon(waiting)
    assert ran == [0.5] and len(table) == 0


async def test_the_claim_is_let_go_on_cancellation_and_a_cancelled_waiter_claims_nothing(autojump_clock):
    """A write cancelled while it holds the id (the phone went away, the lead stops) lets it go at
    that moment (t = 0.5); a waiter cancelled while it waits never held it; the next write claims."""
    table = InFlight()
    ran: list[float] = []

    async def holder():
        with trio.move_on_after(0.5):
            async with table.claim("r1"):
                await trio.sleep(10)

    async def impatient():
        await trio.sleep(0.1)
        with trio.move_on_after(0.2):
            async with table.claim("r1"):
                ran.append(-1.0)  # never: it gave up at t = 0.3, while the holder had it

    async def patient():
        await trio.sleep(0.2)
        async with table.claim("r1"):
            ran.append(trio.current_time())

    async with trio.open_nursery() as n:
        n.start_soon(holder)
        n.start_soon(impatient)
        n.start_soon(patient)
    assert ran == [0.5] and len(table) == 0


async def test_wait_out_waits_without_claiming_and_says_whether_it_waited(autojump_clock):
    """The inbox's repeat: it waits out a dispatch of the item (`True`: look again at what it left)
    without claiming the id; an id not in flight returns False at once."""
    table = InFlight()
    seen = []

    async def dispatch():
        with table.hold("item"):
            await trio.sleep(1.0)

    async def repeat():
        await trio.sleep(0.25)
        seen.append((await table.wait_out("item"), trio.current_time(), "item" in table))
        seen.append((await table.wait_out("item"), trio.current_time()))

    async with trio.open_nursery() as n:
        n.start_soon(dispatch)
        n.start_soon(repeat)
    assert seen == [(True, 1.0, False), (False, 1.0)]
    with table.hold("item"), pytest.raises(RuntimeError):  # a second hold without waiting is a bug
        with table.hold("item"):
            pass


@pytest.mark.parametrize("exc", [sqlite3.OperationalError("database or disk is full"), OSError(errno.ENOSPC, "full"),
                                 OSError(errno.EDQUOT, "quota")])
def test_a_request_not_recorded_on_a_full_disk_is_refused_disk_full(exc):
    """Wire §8: a write that could not be recorded before sending is refused `disk_full` — nothing was
    sent — with the sentence that says what to do; an answer keeps its channel and digest (B5)."""
    answer = WriteRequest(request_id="a1", op="answer", agent="a", ask_id="q1", digest="d1", option_ids=("yes",))
    rec = not_recorded(answer, exc)
    assert (rec.outcome, rec.reason, rec.text) == ("refused", "disk_full", REASONS[Reason.DISK_FULL])
    assert (rec.channel, rec.digest, rec.replay) == ("program", "d1", False)
    send = not_recorded(req(op="send"), exc)
    assert (send.reason, send.channel, send.digest) == ("disk_full", None, None)


def test_a_request_not_recorded_for_another_cause_names_it():
    """Any other failure to record is refused `not_recorded`, its text naming the error's kind."""
    rec = not_recorded(req(), sqlite3.OperationalError("database is locked"))
    assert (rec.outcome, rec.reason) == ("refused", "not_recorded")
    assert rec.text == f"{REASONS[Reason.NOT_RECORDED]}: OperationalError"

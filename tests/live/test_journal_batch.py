"""The request journal's group commit (issue 15.1; features B2, B3): writes made at the same time share
one transaction — one fsync — and each caller still gets its own, true outcome."""

from __future__ import annotations

import json
import sqlite3

import pytest
import trio

from collie.bridge.journal import Journal, Row
from tests.livelab import cleanup, short_dir


@pytest.fixture
def tmp():
    d = short_dir()
    yield d
    cleanup(d)


def row(rid: str) -> Row:
    return Row(request_id=rid, agent="desk", op="send", target="c", fingerprint=f"fp-{rid}", wire_path="/v1/x",
               wire_body={"request_id": rid, "text": "hi"}, ask_id=None, state="pending", receipt=None, attempts=0,
               created_at=1.0)


def counting(journal: Journal) -> list[str]:
    """Every transaction that wrote (each is one commit, one fsync with synchronous=FULL)."""
    commits: list[str] = []

    def trace(sql: str) -> None:
        head = sql.lstrip().split(None, 1)[0].upper()
        if head == "BEGIN" or (head in ("INSERT", "UPDATE", "DELETE") and not journal.db.in_transaction):
            commits.append(sql)
    journal.db.set_trace_callback(trace)
    return commits


async def test_writes_made_at_once_share_commits_and_each_is_on_disk(tmp):
    """100 requests recorded and finished at once: every row is on disk as asked (read back through
    another connection), with far fewer commits than writes (before: one commit per write, 200)."""
    journal = Journal(tmp / "journal.sqlite")
    commits = counting(journal)
    existing: dict[str, object] = {}

    async def one(i: int) -> None:
        rid = f"r{i:03d}"
        existing[rid] = await journal.run(journal.begin, row(rid), 2.0)
        await journal.run(journal.finish, rid, {"outcome": "sent", "n": i}, 3.0)

    async with trio.open_nursery() as n:
        for i in range(100):
            n.start_soon(one, i)
    assert set(existing.values()) == {None}  # each recorded once, as new
    other = sqlite3.connect(tmp / "journal.sqlite")
    rows = other.execute("SELECT request_id, state, receipt, attempts FROM requests ORDER BY request_id").fetchall()
    assert [(r, s, json.loads(rec)["n"], a) for r, s, rec, a in rows] == [
        (f"r{i:03d}", "done", i, 1) for i in range(100)]
    assert len(commits) < 50, len(commits)
    other.close()
    journal.close()


async def test_a_repeat_inside_one_batch_is_recognised(tmp):
    """B2: the same request id begun twice in one batch is recorded once; the second sees the first."""
    journal = Journal(tmp / "journal.sqlite")
    got = []

    async def begin() -> None:
        got.append(await journal.run(journal.begin, row("same"), 2.0))

    async with trio.open_nursery() as n:
        for _ in range(5):
            n.start_soon(begin)
    assert got.count(None) == 1 and all(g.request_id == "same" for g in got if g is not None)
    assert journal.db.execute("SELECT COUNT(*) FROM requests").fetchone()[0] == 1
    journal.close()


async def test_one_failing_write_fails_alone_and_nothing_is_applied_twice(tmp):
    """A write that fails inside a shared transaction rolls the batch back; the others are applied
    once each, on their own, and only the failing caller sees the error."""
    journal = Journal(tmp / "journal.sqlite")
    for i in range(10):
        journal.begin(row(f"r{i}"), 1.0)
    results: dict[int, str] = {}

    async def finish(i: int) -> None:
        receipt = {"outcome": "sent"} if i != 4 else {"outcome": object()}  # not JSON: fails in the batch
        try:
            await journal.run(journal.attempt, f"r{i}", 2.0)
            await journal.run(journal.finish, f"r{i}", receipt, 3.0)
            results[i] = "ok"
        except TypeError:
            results[i] = "failed"

    async with trio.open_nursery() as n:
        for i in range(10):
            n.start_soon(finish, i)
    assert results == {i: "failed" if i == 4 else "ok" for i in range(10)}
    rows = dict(journal.db.execute("SELECT request_id, state || ' ' || attempts FROM requests").fetchall())
    assert rows == {f"r{i}": ("pending 2" if i == 4 else "done 2") for i in range(10)}
    journal.close()


async def test_a_call_cancelled_before_its_batch_never_runs(tmp):
    """A caller that gave up before its write reached the worker thread: the write is not made later
    behind its back."""
    journal = Journal(tmp / "journal.sqlite")
    started = trio.Event()
    release = trio.Event()
    token = trio.lowlevel.current_trio_token()

    def slow() -> None:  # holds the worker so the next call queues
        trio.from_thread.run_sync(started.set, trio_token=token)
        trio.from_thread.run(release.wait, trio_token=token)

    async with trio.open_nursery() as n:
        n.start_soon(journal.run, slow)
        await started.wait()
        with trio.move_on_after(0.01):
            await journal.run(journal.begin, row("late"), 1.0)
        release.set()
    await journal.run(journal.get, "x")
    assert journal.db.execute("SELECT COUNT(*) FROM requests").fetchone()[0] == 0
    journal.close()

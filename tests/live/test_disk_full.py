"""The state folder's disk full, on virtual time (issue 8, issue 15: "the bridge refuses new writes with a
clear reason and loses nothing already acknowledged"; features B2, B3, I1, I4, S2; wire §8).

A real SDK agent, Bridge (with its cache), Writer, Inbox and the lead's API (the SQL inline, the clock
virtual). The fault is injected where the code meets SQLite: while "full", every statement that would
write to a database raises exactly what SQLite raises on a full disk (`OperationalError: database or
disk is full`, SQLITE_FULL); reads still work, as they do on a full disk. bench/faults.py's `diskfull`
trials fill a real tmpfs under a whole lead.
"""

from __future__ import annotations

import logging
import sqlite3
from contextlib import asynccontextmanager

import pytest
import trio

from collie.bridge.cache import Cache
from collie.bridge.writer import Writer
from collie.bridge.writes import WriteRequest
from collie.crew.config import AgentConfig
from collie.lead.door.http import create_app
from collie.lead.members.hub import Hub
from collie.lead.routes.api import create_api
from collie.lead.routes.inbox import register as install_inbox_routes
from tests.apilab import TOKEN, InlineInbox, InlineJournal
from tests.livelab import agent, bridge_for, cleanup, short_dir
from tests.live.test_not_now import Gate, rid, send

OWNER = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def tmp():
    d = short_dir()
    yield d
    cleanup(d)


class Full:
    """A database connection whose disk fills up: `fill()` until `free()`, every write fails as SQLite
    fails on a full disk. Put in place of the owner's connection (`owner.db`)."""

    WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "COMMIT")

    def __init__(self, owner) -> None:
        self.owner, self.inner, self.full = owner, owner.db, False
        owner.db = self

    def fill(self) -> None:
        self.full = True

    def free(self) -> None:
        self.full = False

    def _check(self, sql: str) -> None:
        if self.full and sql.lstrip().upper().startswith(self.WRITES):
            exc = sqlite3.OperationalError("database or disk is full")
            exc.sqlite_errorcode, exc.sqlite_errorname = sqlite3.SQLITE_FULL, "SQLITE_FULL"
            raise exc

    def execute(self, sql, *args):
        self._check(sql)
        return self.inner.execute(sql, *args)

    def executemany(self, sql, rows):
        self._check(sql)
        return self.inner.executemany(sql, rows)

    def __enter__(self):
        return self.inner.__enter__()

    def __exit__(self, *exc):
        return self.inner.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@asynccontextmanager
async def lab(tmp, gate: Gate):
    async with agent(tmp / "a0.sock", on_send=gate.on_send) as collie:
        pane = collie.conversation("c", title="c")
        collie.ready()
        async with bridge_for([AgentConfig("a0", socket=str(tmp / "a0.sock"))], tmp, use_cache=True) as b:
            b.paths.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            writer = Writer(b, InlineJournal(b.paths.state_dir / "journal.sqlite"))
            hub = Hub(b.paths, b, writer)
            inbox = InlineInbox(b.paths.state_dir / "inbox.sqlite", hub, writer)
            app = create_app(lambda a: (create_api(a, b, writer, TOKEN, hub, inbox=inbox), install_inbox_routes(a, hub, inbox)))
            async with trio.open_nursery() as n:
                n.start_soon(inbox.run)
                while b.status("a0").status != "ready":
                    await b.wait_changed()
                yield collie, pane, b, writer, inbox, app.test_client()
                gate.open.set()
                n.cancel_scope.cancel()


async def post(client, path: str, body: dict) -> tuple[int, str, dict | None]:
    got = await client.post(path, headers=OWNER, json=body)
    return got.status_code, got.content_type, await got.get_json(silent=True)


async def test_a_send_while_the_inbox_disk_is_full_is_refused_with_a_reason_and_kept_nowhere(tmp, autojump_clock):
    """B2, I1, issue 15: a send that cannot be written to the inbox is answered with a JSON receipt,
    `refused disk_full` and a sentence saying so (not an HTML 500); it was not acknowledged, so it is kept
    nowhere — not listed, not in the record once space is back — and nothing reached the agent. Both a
    send that would wait (`queued`) and one passing through an empty inbox."""
    gate = Gate()
    async with lab(tmp, gate) as (collie, pane, b, writer, inbox, client):
        full = Full(inbox)
        full.fill()
        body = {"request_id": rid(), "agent": "a0", "conversation": "c", "text": "through", "turn": 0}
        status, kind, got = await post(client, "/api/send", body)
        assert (status, kind) == (200, "application/json")
        assert (got["outcome"], got["reason"]) == ("refused", "disk_full")
        assert "disk" in got["text"] and "full" in got["text"] and "nothing was sent" in got["text"]
        assert gate.texts == [] and await inbox.get(body["request_id"]) is None
        full.free()
        assert (await inbox.submit("local", send("busy", turn=0), sender=None)).outcome == "sent"  # a turn runs
        full.fill()
        queued = {"request_id": rid(), "agent": "a0", "conversation": "c", "text": "waits", "turn": 1}
        status, kind, got = await post(client, "/api/send", queued)
        assert (status, got["outcome"], got["reason"]) == (200, "refused", "disk_full")
        listed = (await (await client.get("/api/agents/local/a0/inbox", headers=OWNER)).get_json())["items"]
        assert [i["text"] for i in listed] == ["busy"]
        full.free()
        await inbox._sync()
        ids = {r[0] for r in inbox.db.execute("SELECT id FROM items")}
        assert body["request_id"] not in ids and queued["request_id"] not in ids
        gate.open.set()
        await trio.sleep(5)
        assert gate.texts == ["busy"]  # what was refused never ran


async def test_what_was_acknowledged_before_the_disk_filled_runs_once_when_space_is_back(tmp, autojump_clock):
    """I4, I5, issue 15: sends acknowledged `queued` before the disk filled are neither lost nor failed:
    while the inbox cannot record a dispatch it sends nothing and waits; once space is back each runs
    exactly once, in order. The lead keeps running throughout."""
    gate = Gate()
    async with lab(tmp, gate) as (collie, pane, b, writer, inbox, client):
        assert (await inbox.submit("local", send("first", turn=0), sender=None)).outcome == "sent"
        queued = [await inbox.submit("local", send(f"q{k}"), sender=None) for k in range(3)]
        assert [q.outcome for q in queued] == ["queued"] * 3
        full = Full(inbox)
        full.fill()
        gate.open.set()  # the first turn ends: the next dispatch cannot be recorded
        await trio.sleep(20)
        assert gate.texts == ["first"]
        assert [(await inbox.get(q.request_id)).state for q in queued] == ["approved"] * 3
        full.free()
        with trio.move_on_after(120):
            while [(await inbox.get(q.request_id)).state for q in queued] != ["done"] * 3:
                await trio.sleep(0.1)
        assert gate.texts == ["first", "q0", "q1", "q2"]
        assert [(await inbox.get(q.request_id)).state for q in queued] == ["done"] * 3


async def test_a_session_write_while_the_journal_disk_is_full_is_refused_and_reaches_nothing(tmp, autojump_clock):
    """Wire §8, B3: the bridge never sends a write it has not first recorded. With the journal's disk
    full a steer is refused `disk_full` and the agent gets nothing; with space back the same request id
    goes through once."""
    gate = Gate()
    async with lab(tmp, gate) as (collie, pane, b, writer, inbox, client):
        assert (await inbox.submit("local", send("go", turn=0), sender=None)).outcome == "sent"
        full = Full(writer.journal)
        full.fill()
        steer = WriteRequest(request_id=rid(), op="steer", agent="a0", conversation="c", text="faster", turn=1)
        got = await writer.write(steer)
        assert (got.outcome, got.reason) == ("refused", "disk_full")
        assert not [c for c in collie.recorder.calls if c[2].endswith("/steer")]
        full.free()
        assert (await writer.write(steer)).outcome == "sent"
        assert len([c for c in collie.recorder.calls if c[2].endswith("/steer")]) == 1


async def test_a_full_disk_under_the_cache_is_logged_once_and_the_bridge_keeps_reading(tmp, autojump_clock, caplog,
                                                                                      monkeypatch):
    """S2, issue 15: the cache failing to save ends nothing: the agent keeps being read (its new items
    reach the phone), the failure is logged once, and once space is back the cache holds what it
    missed."""
    async def inline_save(self, *args):  # the cache's SQL inline (not in a worker thread): the clock stays exact
        await trio.lowlevel.checkpoint()
        self._save(*args)
    monkeypatch.setattr(Cache, "save", inline_save)
    gate = Gate()
    gate.open.set()
    caplog.set_level(logging.INFO)
    async with lab(tmp, gate) as (collie, pane, b, writer, inbox, client):
        cache = b.caches["a0"]
        full = Full(cache)
        full.fill()
        sent = [await inbox.submit("local", send(f"m{k}"), sender=None) for k in range(3)]
        with trio.move_on_after(60):
            while [(await inbox.get(r.request_id)).state for r in sent] != ["done"] * 3:
                await trio.sleep(0.1)
        texts = [i.get("text") for i in b.items("a0", "c")]
        assert ["m0", "got m0", "m1", "got m1", "m2", "got m2"] == [t for t in texts if t]
        failed = [r for r in caplog.records if "cache could not be saved" in r.getMessage()]
        assert len(failed) == 1
        full.free()
        pane.reply("after")  # the next change saves
        await trio.sleep(2)
        cached = {i.get("text") for i in cache.load()["items"].get("c", {}).values()}
        assert {"m0", "got m0", "m1", "got m1", "m2", "got m2", "after"} <= cached
        assert [r for r in caplog.records if "cache is saved again" in r.getMessage()]


async def test_an_owner_change_while_the_inbox_disk_is_full_says_so(tmp, autojump_clock):
    """I3, I9, issue 15: cancelling a waiting item while the inbox cannot be written answers a JSON
    `507 disk_full` that says the change is not on disk yet (not a 500 blaming a defect); it is written,
    and holds, once space is back."""
    gate = Gate()
    async with lab(tmp, gate) as (collie, pane, b, writer, inbox, client):
        assert (await inbox.submit("local", send("busy", turn=0), sender=None)).outcome == "sent"
        waiting = await inbox.submit("local", send("later"), sender=None)
        full = Full(inbox)
        full.fill()
        status, kind, got = await post(client, f"/api/inbox/{waiting.request_id}/cancel", {})
        assert (status, kind, got["error"]) == (507, "application/json", "disk_full") and "not on disk" in got["message"]
        full.free()
        await trio.sleep(2)  # the next commit
        state = inbox.db.execute("SELECT state FROM items WHERE id=?", (waiting.request_id,)).fetchone()
        assert state == ("cancelled",)
        gate.open.set()
        await trio.sleep(5)
        assert gate.texts == ["busy"]


async def test_a_refusal_that_cannot_be_journaled_says_disk_full_and_a_repeat_is_judged_again(tmp, autojump_clock):
    """B2, wire §8: a session write refused before sending is journaled so that a repeat answers the
    same refusal. With the journal's disk full that memory cannot be kept, so the write is refused
    `disk_full` (nothing sent, nothing remembered) rather than with a reason a repeat would not get
    again; with space back the repeat is judged afresh (its own refusal) and remembered from then on."""
    gate = Gate()
    async with lab(tmp, gate) as (collie, pane, b, writer, inbox, client):
        assert (await inbox.submit("local", send("go", turn=0), sender=None)).outcome == "sent"
        full = Full(writer.journal)
        full.fill()
        stale = WriteRequest(request_id=rid(), op="steer", agent="a0", conversation="c", text="faster", turn=0)
        got = await writer.write(stale)  # quotes the turn before the send's: refused before anything is sent
        assert (got.outcome, got.reason) == ("refused", "disk_full")
        full.free()
        again = await writer.write(stale)
        assert (again.outcome, again.reason, again.replay) == ("refused", "turn_moved", False)  # judged afresh
        assert (await writer.write(stale)).replay is True  # and remembered now
        assert not [c for c in collie.recorder.calls if c[2].endswith("/steer")]

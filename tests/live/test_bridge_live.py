"""The bridge reading real SDK agents over real sockets, on virtual time (features W3, W5, W6, S2, S3, L4–L6).

Every timing here is exact virtual time from trio's autojump_clock: no real sleeps.
"""

from __future__ import annotations

import pytest
import trio

from collie.bridge import poller as poller_mod
from collie.bridge.bridge import FOOTER_NO_ANSWER, FOOTER_NO_LIST
from collie.bridge.reader import LEFT_OUT
from collie.crew.config import AgentConfig
from tests.livelab import ALL_CAPS, agent, bridge_for

NO_WATCH = [c for c in ALL_CAPS if c != "watch"]


def gaps(times):
    return [round(b - a, 6) for a, b in zip(times, times[1:])]


async def test_idle_agent_is_polled_every_10_seconds_and_every_2_while_viewed(tmp, autojump_clock):
    """W5: 10 s idle (8,640 a day), 2 s while a phone views the agent."""
    sock = tmp / "a.sock"
    async with agent(sock, caps=NO_WATCH) as collie:
        collie.conversation("c", title="Chat")
        collie.ready()
        async with bridge_for([AgentConfig("desk", socket=str(sock))], tmp) as b:
            await trio.sleep(60.1)
            idle = collie.recorder.times("/v1/state")
            assert gaps(idle) == [10.0] * 6
            b.set_viewing("desk", True)
            start = trio.current_time()
            await trio.sleep(10)
            viewed = [t for t in collie.recorder.times("/v1/state") if t >= start]
            assert viewed[0] - start <= poller_mod.MIN_GAP  # viewing polls at once (reads stay 0.2 s apart)
            assert gaps(viewed) == [2.0] * (len(viewed) - 1) and len(viewed) == 5
            b.set_viewing("desk", False)
            assert b.statistics()["desk"]["not_modified"] >= 10  # unchanged: 304s


async def test_watch_long_polls_and_sees_a_change_at_once(tmp, autojump_clock):
    """With `watch`, an idle agent costs one request per 30 s (a long-poll that ends unchanged is
    followed at once by the next), and an ask shows the moment it is raised."""
    sock = tmp / "a.sock"
    async with agent(sock) as collie:
        pane = collie.conversation("c", title="Chat")
        collie.ready()
        async with bridge_for([AgentConfig("desk", socket=str(sock))], tmp) as b:
            await trio.sleep(45)
            assert gaps(collie.recorder.times("/v1/state")) == [0.0, 30.0]  # the first long-poll right after the first read (29)
            async with trio.open_nursery() as n:
                n.start_soon(lambda: pane.ask(kind="text", title="Branch name?"))
                raised = trio.current_time()
                while b.status("desk").waiting_count == 0:
                    await b.wait_changed()
                assert trio.current_time() - raised == pytest.approx(0.0, abs=1e-6)
                n.cancel_scope.cancel()


async def test_without_watch_a_change_waits_for_the_next_poll(tmp, autojump_clock):
    sock = tmp / "a.sock"
    async with agent(sock, caps=NO_WATCH) as collie:
        pane = collie.conversation("c", title="Chat")
        collie.ready()
        async with bridge_for([AgentConfig("desk", socket=str(sock))], tmp) as b:
            await trio.sleep(15)
            async with trio.open_nursery() as n:
                n.start_soon(lambda: pane.ask(kind="text", title="Branch name?"))
                while b.status("desk").waiting_count == 0:
                    await b.wait_changed()
                assert trio.current_time() == pytest.approx(20.0)
                n.cancel_scope.cancel()


async def test_a_hung_agent_never_delays_another(tmp, autojump_clock):
    """Every request has a timeout; one agent that accepts and never answers leaves the others alone."""
    hung_path = tmp / "hung.sock"
    sock = trio.socket.socket(trio.socket.AF_UNIX)
    await sock.bind(str(hung_path))
    hung_path.chmod(0o600)
    sock.listen(5)
    good = tmp / "good.sock"
    async with agent(good) as collie:
        collie.conversation("c")
        collie.ready()
        async with bridge_for([AgentConfig("hung", socket=str(hung_path)), AgentConfig("good", socket=str(good))],
                              tmp) as b:
            while b.status("good").status != "ready":
                await b.wait_changed()
            assert trio.current_time() < 0.01
            while b.status("hung").status != "unreachable":
                await b.wait_changed()
            assert trio.current_time() == pytest.approx(poller_mod.HELLO_TIMEOUT)
            assert b.status("hung").reason == "timeout"
    sock.close()


async def test_agent_restart_is_noticed_and_greeted_again(tmp, autojump_clock):
    """W3: when the agent goes away the bridge says why; a new instance gets a new hello."""
    sock = tmp / "a.sock"
    cfg = AgentConfig("desk", socket=str(sock))
    async with trio.open_nursery() as outer:
        stop_first = trio.Event()

        async def first():
            async with agent(sock) as collie:
                collie.conversation("c")
                collie.ready()
                await stop_first.wait()

        outer.start_soon(first)
        await trio.sleep(0.01)
        async with bridge_for([cfg], tmp) as b:
            while b.status("desk").status != "ready":
                await b.wait_changed()
            first_instance = b.status("desk").instance
            stop_first.set()
            while b.status("desk").status != "unreachable":
                await b.wait_changed()
            assert b.status("desk").reason in ("no-socket", "connection-refused")
            async with agent(sock) as again:
                again.conversation("c")
                again.ready()
                while b.status("desk").status != "ready":
                    await b.wait_changed()
                assert b.status("desk").instance == again.instance != first_instance
                assert [c for c in again.recorder.calls if c[2] == "/hello"]
                assert again.bridge_hellos[0]["name"] == "desk" and again.bridge_hellos[0]["wire"] == {"min": 1, "max": 1}


async def test_wrong_token_and_version_refusal_are_distinct(tmp, autojump_clock, monkeypatch):
    """W6, W2: a refused token is `unauthorized`; a version refusal is `version_mismatch`."""
    token = "k" * 40
    async with open_agent_url(token) as (collie, url):
        async with bridge_for([AgentConfig("web", url=url, token="w" * 40),
                               AgentConfig("ok", url=url, token=token)], tmp) as b:
            while b.status("web").status == "starting" or b.status("ok").status == "starting":
                await b.wait_changed()
            assert (b.status("web").status, b.status("web").reason) == ("unreachable", "unauthorized")
            assert b.status("ok").status == "ready" and not b.status("ok").local is False
    sock = tmp / "f.sock"
    async with agent(sock, wire=(2, 3)) as collie:
        collie.ready()
        async with bridge_for([AgentConfig("future", socket=str(sock))], tmp) as b:
            await trio.sleep(25)
            assert b.status("future").status == "version_mismatch"
            assert b.warning("future") == ("Program speaks wire 2..3, this Collie speaks v1. "
                                           "Update Collie, or the durable agent's SDK.")
            paths = {p for _t, _m, p in collie.recorder.calls}
            assert paths == {"/hello"}  # nothing but hello is read
            assert gaps(collie.recorder.times("/hello")) == [10.0, 10.0]


async def test_token_next_is_accepted_during_rotation(tmp, autojump_clock):
    """T7: the SDK accepts COLLIE_TOKEN and, while set, COLLIE_TOKEN_NEXT."""
    async with open_agent_url("o" * 40, token_next="n" * 40) as (collie, url):
        async with bridge_for([AgentConfig("a", url=url, token="o" * 40), AgentConfig("b", url=url, token="n" * 40)],
                              tmp) as b:
            while {b.status("a").status, b.status("b").status} != {"ready"}:
                await b.wait_changed()


def open_agent_url(token, **kw):
    from contextlib import asynccontextmanager

    from collie.crew.sdk import open_collie

    @asynccontextmanager
    async def ctx():
        async with open_collie(url="http://127.0.0.1:0", token=token, caps=["asks", "history"], **kw) as collie:
            collie.conversation("c")
            collie.ready()
            yield collie, collie.address

    return ctx()


async def test_items_sync_with_the_left_out_gap(tmp, autojump_clock):
    """S3: the agent dropped the start before the bridge read it: Chat shows the left-out line there."""
    sock = tmp / "a.sock"
    async with agent(sock, history_limit=3) as collie:
        pane = collie.conversation("c")
        for i in range(10):
            pane.reply(f"line {i}")
        collie.ready()
        async with bridge_for([AgentConfig("desk", socket=str(sock))], tmp) as b:
            while not b.items("desk", "c"):  # the view is announced first, then again once items are in
                await b.wait_changed()
            shown = b.items("desk", "c")
            assert shown[0] == {"kind": "gap", "seq": 8, "text": LEFT_OUT}
            assert [i["text"] for i in shown[1:]] == ["line 7", "line 8", "line 9"]
            growing = pane.reply("Hel", final=False)
            await trio.sleep(1)
            growing.finish("Hello")
            await trio.sleep(1)
            assert b.items("desk", "c")[-1]["text"] == "Hello" and b.items("desk", "c")[-1]["final"] is True
            assert sum(1 for i in b.items("desk", "c") if i["kind"] == "gap") == 1


async def test_closed_list_read_through_and_footers(tmp, autojump_clock):
    """L4, L5, L6: closed rows come from the agent, 100 a page; each failure names its footer."""
    sock = tmp / "a.sock"
    async with agent(sock) as collie:
        for i in range(250):
            collie.conversation(f"old-{i:03d}", title=f"Old {i}").close()
        collie.ready()
        async with bridge_for([AgentConfig("desk", socket=str(sock))], tmp) as b:
            while b.status("desk").status != "ready":
                await b.wait_changed()
            pages, cursor = [], None
            while True:
                page = await b.read_closed("desk", cursor)
                pages.append(page)
                cursor = page.next
                if cursor is None:
                    break
            assert [len(p.conversations) for p in pages] == [100, 100, 50]
            assert pages[0].footer is None
            before = len(collie.recorder.calls)
            await b.read_closed("desk")
            assert len(collie.recorder.calls) == before + 1  # never cached: every read reaches the agent
    async with agent(sock, keeps_list=False) as silent:
        silent.ready()
        async with bridge_for([AgentConfig("silent", socket=str(sock))], tmp) as b:
            while b.status("silent").status != "ready":
                await b.wait_changed()
            assert (await b.read_closed("silent")).footer == FOOTER_NO_LIST
            assert FOOTER_NO_LIST == "This durable agent doesn't keep a list of its conversations."
    async with agent(sock, caps=["asks"]) as nohist:
        nohist.ready()
        async with bridge_for([AgentConfig("nh", socket=str(sock))], tmp) as b:
            while b.status("nh").status != "ready":
                await b.wait_changed()
            got = await b.read_closed("nh")
            assert got.footer is None and got.conversations == [] and got.reason == "no_history"
    async with agent(sock) as down:
        down.ready()
        async with bridge_for([AgentConfig("d", socket=str(sock))], tmp) as b:
            while b.status("d").status != "ready":
                await b.wait_changed()
            down._ready = trio.Event()  # the agent stops answering
            got = await b.read_closed("d")
            assert got.footer == FOOTER_NO_ANSWER


async def test_the_cache_opens_panes_while_the_agent_is_down(tmp, autojump_clock):
    """S2: restarted with the agent gone, the bridge still has the conversations and items it read."""
    sock = tmp / "a.sock"
    cfg = AgentConfig("desk", socket=str(sock))
    async with agent(sock) as collie:
        collie.conversation("c", title="Chat").reply("kept in the cache")
        collie.ready()
        async with bridge_for([cfg], tmp, use_cache=True) as b:
            while b.status("desk").status != "ready":
                await b.wait_changed()
            await trio.sleep(1)
    async with bridge_for([cfg], tmp, use_cache=True) as b:
        assert [c.title for c in b.conversations("desk")] == ["Chat"]
        assert b.items("desk", "c")[0]["text"] == "kept in the cache"
        while b.status("desk").status == "starting":
            await b.wait_changed()
        assert b.status("desk").status == "unreachable"
        assert [c.title for c in b.conversations("desk")] == ["Chat"]  # the last good view stays


async def test_restart_with_a_warm_cache_is_ready_at_once(tmp, autojump_clock):
    """A tag restored from the cache is checked by a plain read: an unchanged `watch` agent must not
    hold a restarted bridge in `starting` for a 30 s long-poll."""
    sock = tmp / "a.sock"
    cfg = AgentConfig("desk", socket=str(sock))
    async with agent(sock) as collie:
        collie.conversation("c", title="Chat")
        collie.ready()
        async with bridge_for([cfg], tmp, use_cache=True) as b:
            while b.status("desk").status != "ready":
                await b.wait_changed()
            await trio.sleep(1)
        start = trio.current_time()
        async with bridge_for([cfg], tmp, use_cache=True) as b:
            while b.status("desk").status != "ready":
                await b.wait_changed()
            assert trio.current_time() - start < 1.0


async def test_a_burst_of_changes_writes_the_cache_once_a_second_and_the_last_state_when_stopping(
        tmp, autojump_clock, monkeypatch):
    """Issue 15.1 (S2): the cache is written on the leading edge and then at most once per second,
    however often the agent changes; the newest state is written when the bridge stops, so a
    restart still opens every item it had read."""
    from collie.bridge.cache import Cache

    saves: list[int] = []

    async def counted(self, *args):
        # written inline, not in the worker thread: a thread runs in real time while virtual time jumps
        # on, so a slow first save (a loaded machine) swallowed the whole burst's window and 0 were
        # counted. What is checked here is the poller's pacing, on virtual time.
        saves.append(1)
        self._save(*args)
        await trio.lowlevel.checkpoint()
    monkeypatch.setattr(Cache, "save", counted)
    sock = tmp / "a.sock"
    cfg = AgentConfig("desk", socket=str(sock))
    async with agent(sock) as collie:
        pane = collie.conversation("c", title="Chat")
        collie.ready()
        async with bridge_for([cfg], tmp, use_cache=True) as b:
            while b.status("desk").status != "ready":
                await b.wait_changed()
            await trio.sleep(2)
            saves.clear()
            start = trio.current_time()
            for i in range(40):  # 40 changes over 2 s, each read by the bridge
                pane.reply(f"line {i}")
                await trio.sleep(0.05)
            while b.items("desk", "c")[-1]["text"] != "line 39":
                await b.wait_changed()
            span = trio.current_time() - start
            assert 1 <= len(saves) <= span + 1, (len(saves), span)
    async with bridge_for([cfg], tmp, use_cache=True) as b:
        assert b.items("desk", "c")[-1]["text"] == "line 39"


async def test_an_unchanged_idle_read_is_not_a_change(tmp, autojump_clock):
    """Issue 16 (idle CPU): an idle agent's reads (a long-poll ending unchanged every 30 s) tell nobody
    anything — no change is announced, so the live channel, the inbox and the crew link (a whole view
    frame to the lead) stay asleep. Before, the time of the last good answer was part of the status,
    and every idle read was a change."""
    sock = tmp / "a.sock"
    async with agent(sock) as collie:
        pane = collie.conversation("c", title="Chat")
        collie.ready()
        async with bridge_for([AgentConfig("desk", socket=str(sock))], tmp) as b:
            while b.status("desk").status != "ready":
                await b.wait_changed()
            await trio.sleep(5)
            changes: list[float] = []
            b.on_agent_change.append(lambda name: changes.append(trio.current_time()))
            start = trio.current_time()
            await trio.sleep(300)
            assert len([t for t in collie.recorder.times("/v1/state") if t >= start]) >= 9  # it was read
            assert changes == []
            pane.reply("a real change")  # is still announced at once
            await trio.sleep(0.01)
            assert len(changes) >= 1 and changes[0] - start == pytest.approx(300, abs=0.01)


async def test_a_hand_written_entry_that_breaks_a_rule_shows_unreachable_with_the_reason(tmp, autojump_clock):
    """A9 (T1, T4, T6): entries written into sources.json by hand, past `collie durable attach`'s checks —
    plain HTTP off this machine, a relative socket path, a token too short — each show Unreachable with
    the reason the attach would have given, are never contacted, and do not stop the bridge or the
    agent beside them."""
    import json

    from collie.crew.config import load_bridge_config
    from collie.crew.fsutil import ensure_private_dir
    from collie.crew.paths import Paths

    paths = Paths(config_dir=tmp / "cfg", state_dir=tmp / "state")
    ensure_private_dir(paths.config_dir)
    sock = tmp / "a.sock"
    paths.sources.write_text(json.dumps([
        {"name": "far", "kind": "durable", "url": "http://agent.example:9000/v1", "token": "t" * 43},
        {"name": "rel", "kind": "durable", "socket": "run/app.sock"},
        {"name": "weak", "kind": "durable", "url": "https://agent.example/v1", "token": "short"},
        {"name": "desk", "kind": "durable", "socket": str(sock)}]))
    paths.sources.chmod(0o600)
    config = load_bridge_config(paths, environ={})
    contacted: list[str] = []

    def client(agent):
        contacted.append(agent.name)
        from collie.bridge.client import AgentClient
        return AgentClient(agent)

    async with agent(sock, caps=ALL_CAPS) as collie:
        collie.conversation("c", title="Chat")
        collie.ready()
        async with bridge_for(list(config.agents), tmp, client_factory=client) as b:
            await trio.sleep(30)
            status = {s.name: s for s in b.snapshot()}
            assert status["desk"].status == "ready"
            for name in ("far", "rel", "weak"):
                assert status[name].status == "unreachable" and status[name].reason and status[name].detail, status[name]
            assert "http" in status["far"].detail.lower() and "absolute" in status["rel"].detail.lower()
            assert "token" in status["weak"].detail.lower()
            assert contacted == ["desk"]

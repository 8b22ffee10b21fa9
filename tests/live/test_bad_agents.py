"""A misbehaving agent never takes the bridge down (issue 3, bad input).

Garbage JSON, a huge body, wrong types, a status the contract does not have: the bridge keeps
running, keeps the last good view, says why (`protocol`, `too-large`), and logs one line per problem.
"""

from __future__ import annotations

import json
import logging
from functools import partial

import pytest
import trio

from collie.bridge.bridge import Bridge
from collie.bridge.client import STATE_CAP
from collie.crew.config import AgentConfig
from collie.crew.sdk import agent as sdk_agent
from collie.crew.sdk.server import Response, handle_connection
from tests.livelab import bridge_for

HELLO = {"wire": {"min": 1, "max": 1}, "runtime": "evil", "instance": "e1", "caps": ["asks"]}
GOOD = {"rev": 1, "instance": "e1", "conversations": [{"id": "c", "title": "Good", "turn": 0, "items_rev": 0,
                                                        "asks": []}], "starters": []}


class Evil:
    def __init__(self) -> None:
        self.state_answer: object = GOOD

    async def handle(self, req):
        if req.path == "/hello":
            return Response(200, HELLO)
        if req.path == "/v1/state":
            if isinstance(self.state_answer, Response):
                return self.state_answer
            return Response(200, self.state_answer, (("etag", f'"e1.{id(self.state_answer)}"'),))
        if req.path.endswith("/items"):
            return Response(200, {"items": [], "first_kept": 1, "last": 0, "items_rev": 0, "next_since": 0})
        return Response(404, {"error": "not_found"})


class RawBody(Response):
    pass


@pytest.fixture
def log_lines():
    lines: list[str] = []

    class H(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    logger = logging.getLogger("collie")
    h = H()
    logger.addHandler(h)
    logger.setLevel(logging.INFO)
    yield lines
    logger.removeHandler(h)


async def serve_evil(evil: Evil, path, *, task_status=trio.TASK_STATUS_IGNORED):
    sock = trio.socket.socket(trio.socket.AF_UNIX)
    await sock.bind(str(path))
    path.chmod(0o600)
    sock.listen(8)
    task_status.started()
    await trio.serve_listeners(partial(handle_connection, handler=evil.handle), [trio.SocketListener(sock)])


async def until(b: Bridge, name: str, pred):
    while not pred(b.status(name)):
        await b.wait_changed()


@pytest.mark.parametrize(("answer", "reason"), [
    (Response(200, None), "protocol"),  # 200 with no body
    ({"rev": "many", "instance": "e1", "conversations": "lots"}, "protocol"),  # wrong types
    ({"rev": 2, "instance": "e1", "conversations": [{"id": 5}]}, "protocol"),
    (Response(200, {"huge": "x" * (STATE_CAP + 10)}), "too-large"),
    (Response(500, {"error": "internal", "message": "boom"}), "internal"),  # the agent said so (wire §1)
    (Response(418, {"error": "teapot"}), "protocol"),
    # wire §4: an ask whose digest RFC 8785 cannot form (a number no IEEE 754 double holds)
    ({**GOOD, "rev": 2, "conversations": [{**GOOD["conversations"][0], "asks": [
        {"id": "a", "kind": "text", "title": "t", "n": 10**400}]}]}, "protocol"),
])
async def test_a_bad_state_keeps_the_last_good_view(tmp, autojump_clock, log_lines, answer, reason):
    evil = Evil()
    async with trio.open_nursery() as n:
        await n.start(serve_evil, evil, tmp / "e.sock")
        async with bridge_for([AgentConfig("evil", socket=str(tmp / "e.sock"))], tmp) as b:
            await until(b, "evil", lambda s: s.status == "ready")
            evil.state_answer = answer
            await until(b, "evil", lambda s: s.status == "unreachable")
            assert b.status("evil").reason == reason
            assert [c.title for c in b.conversations("evil")] == ["Good"]  # the last good view stays
            before = len([line for line in log_lines if "unreachable" in line])
            await trio.sleep(60)  # many more bad answers: no new log line
            assert len([line for line in log_lines if "unreachable" in line]) == before == 1
            evil.state_answer = GOOD
            await until(b, "evil", lambda s: s.status == "ready")
        n.cancel_scope.cancel()


async def test_a_bug_reading_one_agent_stays_with_that_agent(tmp, autojump_clock, log_lines, monkeypatch):
    """Every peer is untrusted and a failure is contained to it: an unexpected error while the bridge
    reads one agent's answer (here a stand-in bug in the ask parser; before: an ask with a nanosecond
    timestamp past 2^53 did it) makes that agent Unreachable `bridge-error`, logged once with its
    traceback, retried with backoff — the bridge and the other agent go on (before: the lead exited)."""
    import collie.bridge.reader as reader_mod

    real = reader_mod.sanitize_ask

    def buggy(raw, **kw):
        if raw.get("id") == "boom":
            raise RuntimeError("a bug")
        return real(raw, **kw)
    monkeypatch.setattr(reader_mod, "sanitize_ask", buggy)
    evil, good = Evil(), Evil()
    async with trio.open_nursery() as n:
        await n.start(serve_evil, evil, tmp / "e.sock")
        await n.start(serve_evil, good, tmp / "g.sock")
        agents = [AgentConfig("evil", socket=str(tmp / "e.sock")), AgentConfig("good", socket=str(tmp / "g.sock"))]
        async with bridge_for(agents, tmp) as b:
            await until(b, "evil", lambda s: s.status == "ready")
            evil.state_answer = {**GOOD, "rev": 2, "conversations": [{**GOOD["conversations"][0], "asks": [
                {"id": "boom", "kind": "text", "title": "t"}]}]}
            await until(b, "evil", lambda s: s.status == "unreachable")
            assert b.status("evil").reason == "bridge-error"
            await trio.sleep(60)
            assert b.status("good").status == "ready"
            assert sum("bridge-error" in line for line in log_lines) == 1
            evil.state_answer = {**GOOD, "rev": 3}
            await until(b, "evil", lambda s: s.status == "ready")
        n.cancel_scope.cancel()


async def test_an_ask_with_integers_past_2_53_is_read(tmp, autojump_clock):
    """Wire §4: an ask with a nanosecond timestamp is read and answerable; its digest is RFC 8785's
    (the number as a double), the bridge does not fail on it."""
    from collie.crew.wire import ask_digest

    ask = {"id": "ns", "kind": "text", "title": "t", "created_ns": 1764460800123456789}
    evil = Evil()
    evil.state_answer = {**GOOD, "conversations": [{**GOOD["conversations"][0], "asks": [ask]}]}
    async with trio.open_nursery() as n:
        await n.start(serve_evil, evil, tmp / "e.sock")
        async with bridge_for([AgentConfig("evil", socket=str(tmp / "e.sock"))], tmp) as b:
            await until(b, "evil", lambda s: s.status == "ready")
            assert b.readers["evil"].conversations["c"].asks[0].digest == ask_digest(ask)
        n.cancel_scope.cancel()


async def test_garbage_bytes_instead_of_json(tmp, autojump_clock):
    """An answer that is not JSON at all."""

    async def garbage(stream):
        async with stream:
            await stream.receive_some(65536)
            await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nnot json!")

    sock = trio.socket.socket(trio.socket.AF_UNIX)
    await sock.bind(str(tmp / "g.sock"))
    (tmp / "g.sock").chmod(0o600)
    sock.listen(8)
    async with trio.open_nursery() as n:
        n.start_soon(trio.serve_listeners, garbage, [trio.SocketListener(sock)])
        async with bridge_for([AgentConfig("g", socket=str(tmp / "g.sock"))], tmp) as b:
            await until(b, "g", lambda s: s.status == "unreachable")
            assert b.status("g").reason == "protocol" and "not JSON" in b.status("g").detail
        n.cancel_scope.cancel()


async def test_a_wrong_protocol_on_the_socket(tmp, autojump_clock):
    """Something that is not HTTP at all answers on the socket."""

    async def junk(stream):
        async with stream:
            await stream.send_all(b"\x00\x01 this is not http \r\n\r\n")

    sock = trio.socket.socket(trio.socket.AF_UNIX)
    await sock.bind(str(tmp / "j.sock"))
    (tmp / "j.sock").chmod(0o600)
    sock.listen(8)
    async with trio.open_nursery() as n:
        n.start_soon(trio.serve_listeners, junk, [trio.SocketListener(sock)])
        async with bridge_for([AgentConfig("j", socket=str(tmp / "j.sock"))], tmp) as b:
            await until(b, "j", lambda s: s.status == "unreachable")
            assert b.status("j").reason in ("closed", "protocol")
        n.cancel_scope.cancel()


async def test_version_footer_on_the_closed_list(tmp, autojump_clock):
    """L5: a version refusal shows the `Program speaks …` footer under the list."""
    from tests.livelab import agent

    async with agent(tmp / "f.sock", wire=(2, 2)) as collie:
        collie.ready()
        async with bridge_for([AgentConfig("f", socket=str(tmp / "f.sock"))], tmp) as b:
            await until(b, "f", lambda s: s.status == "version_mismatch")
            got = await b.read_closed("f")
            assert got.footer == "Program speaks wire v2, this Collie speaks v1. Update Collie, or the durable agent's SDK."


async def test_sdk_warns_where_it_cannot_tell_the_caller(tmp, monkeypatch, capsys):
    """T3, K2: where the peer cannot be read, the SDK prints one warning line first."""
    monkeypatch.setattr(sdk_agent, "platform_can_tell_peer", lambda: False)
    async with sdk_agent.open_collie(socket=str(tmp / "w.sock"), caps=["asks"]) as collie:
        collie.ready()
    assert capsys.readouterr().err.splitlines() == [sdk_agent.CALLER_CHECK_WARNING]
    async with sdk_agent.open_collie(socket=str(tmp / "w.sock"), caps=["asks"], caller_check="off") as collie:
        collie.ready()
    assert capsys.readouterr().err == ""
    assert json.dumps(sdk_agent.CALLER_CHECK_WARNING)

"""A hostile member against a real lead (issue 9.1, 9.5, 9.6; crew.md §2).

The member here is a fake written from the contract, speaking over a real WebSocket to a real
`collie serve` lead process. It answers forwarded writes with receipts that miss fields or carry
wrong types, and sends unknown frame types, garbage JSON, binary frames, frames over the size limit,
views that break the rules, and a flood. Invariants:

- the lead never exits, and its dashboard keeps answering;
- a write whose receipt does not fit the crew wire is answered `unknown` at once (never a refusal,
  never `sent`: the lead cannot know what the member did, B3);
- another member, connected all along, stays online and its writes keep working;
- what the hostile member sends never reaches the log raw (no forged lines, no escape sequences).
"""

from __future__ import annotations

import gc
import json
import uuid
from pathlib import Path

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed, open_websocket_url

from collie.crew import crewwire
from collie.lead.members.session import MAX_BAD_FRAMES
from tests.crewlab import Crew, fake_view, hello_frame, invite, wait_for
from tests.livelab import short_dir

pytestmark = pytest.mark.slow

DEEP = 900  # nested JSON a little under the parser's own limit


@pytest.fixture
def crew():
    c = Crew(short_dir("ch"))
    yield c
    c.stop()


def bad_receipt(variant: str, req: dict) -> dict | bytes | str:
    rid, op = req["id"], req["op"]
    good = {"request_id": rid, "op": op, "outcome": "sent"}
    return {
        "missing-fields": {"type": "receipt", "id": rid, "receipt": {"outcome": "sent"}},
        "wrong-types": {"type": "receipt", "id": rid, "receipt": {**good, "turn": "4", "replay": "no"}},
        "not-an-object": {"type": "receipt", "id": rid, "receipt": "sent"},
        "someone-elses": {"type": "receipt", "id": rid, "receipt": {**good, "request_id": "someone-else"}},
        "deep": {"type": "receipt", "id": rid, "receipt": {**good, "current_ask": json.loads("[" * DEEP + "]" * DEEP)}},
        "extra-fields-are-fine": {"type": "receipt", "id": rid, "receipt": {**good, "future": 1}},
    }[variant]


async def responder(ws, seen: list) -> None:
    """Answer every request the lead forwards with the bad receipt its title names (a send: missing
    fields the first time; the inbox's resend of it then gets a good receipt)."""
    while True:
        msg = json.loads(await ws.get_message())
        if msg["type"] != "request":
            continue
        seen.append(msg)
        variant = msg["args"].get("title") or "missing-fields"
        if msg["op"] == "send" and sum(1 for m in seen if m["id"] == msg["id"]) > 1:
            variant = "extra-fields-are-fine"
        await ws.send_message(json.dumps(bad_receipt(variant, msg)))


# trio-websocket (the fake member's client) leaves its socket to the garbage collector when the server
# closes first; that is the test client's leak, not the lead's
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_hostile_member_never_takes_the_lead_down(crew):
    """9.1: no frame from a member ends the lead; a bad receipt is `unknown`; others are unaffected."""
    crew.start_lead()
    good = crew.add_member("good")
    good.agent("lab", "streamer")
    good.serve()
    token = invite(crew, "evil")
    wait_for(lambda: crew.online("good"), what="good member online")
    url = crew.address.replace("http://", "ws://") + "/crew/v1"
    headers = [(b"authorization", f"Bearer {token}".encode())]
    api_token = (crew.lead.paths.state_dir / "api-token").read_text().strip()

    def lead_is_up():
        assert crew.lead.bridge.poll() is None, f"the lead exited: {crew.lead.log()[-3000:]}"

    async with httpx.AsyncClient(base_url=crew.address, headers={"authorization": f"Bearer {api_token}"},
                                 timeout=30) as c:
        async def dashboard() -> dict:
            got = await c.get("/api/dashboard")
            assert got.status_code == 200
            return {s["machine"]: s for s in got.json()["sections"]}

        async def until(fn, what: str):
            with trio.fail_after(20):
                while not (value := await fn()):
                    await trio.sleep(0.05)
                return value

        async def good_still_works():
            lead_is_up()
            sections = await dashboard()
            assert sections["good"]["online"] and sections["good"]["agents"][0]["status"] == "ready"
            turn = (await c.get("/api/agents/good/lab/conversations/chat")).json()["turn"]
            got = (await c.post("/api/send", json={"request_id": str(uuid.uuid4()), "machine": "good", "agent": "lab",
                                                   "conversation": "chat", "text": "still here?", "turn": turn})).json()
            assert got["outcome"] in ("sent", "queued"), got

        seen: list = []
        with trio.fail_after(120):
            async with open_websocket_url(url, extra_headers=headers, max_message_size=16 * 2**20) as ws:
                await ws.send_message(hello_frame("evil"))
                assert json.loads(await ws.get_message())["type"] == "welcome"
                await ws.send_message(json.dumps({"type": "snapshot", "agents": [fake_view("lab", 8)]}))
                await until(lambda: _has_section(c, "evil"), "the hostile member's section")
                async with trio.open_nursery() as n:
                    n.start_soon(responder, ws, seen)
                    # the crash of issue 9.1: a send passes the inbox, and its receipt misses fields
                    got = (await c.post("/api/send", json={"request_id": str(uuid.uuid4()), "machine": "evil",
                                                           "agent": "lab", "conversation": "c00", "text": "hi",
                                                           "turn": 3})).json()
                    assert got["outcome"] == "unknown", got
                    lead_is_up()
                    for i, variant in enumerate(("missing-fields", "wrong-types", "not-an-object", "someone-elses",
                                                 "deep", "extra-fields-are-fine")):
                        got = (await c.post(f"/api/agents/evil/lab/conversations/c0{i + 1}/rename",
                                            json={"request_id": str(uuid.uuid4()), "title": variant, "turn": 3})).json()
                        expected = "sent" if variant == "extra-fields-are-fine" else "unknown"
                        assert got["outcome"] == expected, (variant, got)
                        lead_is_up()
                    # frames that fit nothing
                    for frame in ("{not json", "[1, 2]", '{"type": 5}', "null",
                                  json.dumps({"type": "evil\n[bridge] FATAL forged \x1b[31mred"}),
                                  json.dumps({"type": "hello", "label": "evil"}),
                                  json.dumps({"type": "snapshot", "agents": "lab"}),
                                  json.dumps({"type": "snapshot", "agents": [{**fake_view("lab"), "name": "../x"}]}),
                                  json.dumps({"type": "snapshot", "agents": [fake_view(f"a{i}") for i in range(101)]}),
                                  json.dumps({"type": "agent", "name": "lab", "view": {"status": {"status": "bogus"}}}),
                                  json.dumps({"type": "agent", "name": "lab", "view": {
                                      **fake_view("lab"), "status": {"status": "ready", "detail": ["\x1b[2J"]}}}),
                                  json.dumps({"type": "read_result", "id": "nobody", "ok": "yes"}),
                                  "[" * 5000 + "]" * 5000):
                        await ws.send_message(frame)
                    await ws.send_message(b"\x00\xff binary")
                    deep_ask = json.loads("{\"a\":" * DEEP + "1" + "}" * DEEP)
                    deep = fake_view("lab", 2)
                    deep["state"]["conversations"][0]["asks"] = [{"id": "k", "kind": "permission", "x": deep_ask}]
                    await ws.send_message(json.dumps({"type": "agent", "name": "lab",
                                                      "view": {k: v for k, v in deep.items() if k != "name"}}))
                    await good_still_works()
                    sections = await dashboard()
                    assert sections["evil"]["online"], "ignored frames do not end the link"
                    # a flood of views: each is fed in turn (newest wins), the lead keeps answering
                    for i in range(3000):
                        await ws.send_message(json.dumps({"type": "agent", "name": "lab",
                                                          "view": {**fake_view("lab", 20, turn=i)}}))
                    await good_still_works()
                    n.cancel_scope.cancel()
            # a frame over the limit: the lead's server closes this link (1009), nothing else
            closed = await one_link(url, headers, [json.dumps({"type": "beat", "pad": "x" * (crewwire.MAX_FRAME + 1)})])
            assert closed.code == 1009
            await good_still_works()
            # a flood of garbage: the link is closed after MAX_BAD_FRAMES, the lead goes on
            # (exactly one over the limit: frames sent after the lead's close frame leave hypercorn's TCP
            # connection open until the client closes it — reported with issue 9.7, not fixed here)
            closed = await one_link(url, headers, ["garbage"] * (MAX_BAD_FRAMES + 1))
            assert closed.reason == crewwire.PROTOCOL
            await good_still_works()

    assert len(seen) >= 7
    log = crew.lead.log()
    assert "\n[bridge] FATAL" not in log and "\x1b" not in log, "a member's text reached the log raw"
    assert log.count("does not fit the crew wire") <= 8, "bad frames are logged once per link"
    assert "Traceback" not in log
    gc.collect()  # trio-websocket's leaked sockets warn here (filtered), not in whichever test runs next


async def _has_section(c: httpx.AsyncClient, machine: str) -> bool:
    got = (await c.get("/api/dashboard")).json()["sections"]
    return any(s["machine"] == machine and s["agents"] for s in got)


async def one_link(url: str, headers: list, frames: list[str]):
    """Connect as the hostile member, send `frames`, and return how the lead closed the link."""
    closed = []
    async with open_websocket_url(url, extra_headers=headers, max_message_size=16 * 2**20) as ws:
        await ws.send_message(hello_frame("evil"))
        assert json.loads(await ws.get_message())["type"] == "welcome"

        async def drain():  # read whatever the lead sends until it closes the link
            try:
                while True:
                    await ws.get_message()
            except ConnectionClosed as exc:
                closed.append(exc.reason)

        async with trio.open_nursery() as n:
            n.start_soon(drain)
            try:
                for frame in frames:
                    await ws.send_message(frame)
            except ConnectionClosed:
                pass
    return closed[0]

"""The phone's items route pages by revision and is bounded (issues 8.8, 9.6; features C1, S2, S3).

A real SDK agent, a real bridge and the lead's API through quart's test client, on autojump_clock.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

import trio

from collie.bridge.writer import Writer
from collie.crew.config import AgentConfig
from collie.lead.door.http import create_app
from collie.lead.routes.api import create_api
from tests.livelab import InlineJournal, agent, bridge_for

TOKEN = "t" * 64
ROUTE = "/api/agents/local/desk/conversations/c/items"


@asynccontextmanager
async def lab(tmp):
    sock = tmp / "a.sock"
    async with agent(sock) as collie:
        pane = collie.conversation("c", title="Chat")
        collie.ready()
        async with bridge_for([AgentConfig("desk", socket=str(sock))], tmp) as b:
            w = Writer(b, InlineJournal(tmp / "journal.sqlite"))
            app = create_app(lambda a: create_api(a, b, w, TOKEN))
            while b.status("desk").status != "ready":
                await b.wait_changed()
            yield pane, b, app.test_client()


async def get(client, query: str) -> dict:
    resp = await client.get(ROUTE + query, headers={"authorization": f"Bearer {TOKEN}"})
    assert resp.status_code == 200
    return await resp.get_json()


async def settle(b) -> None:
    await trio.sleep(1)  # the bridge reads changes at once (long-poll); a second is plenty of virtual time


async def test_a_client_following_next_since_sees_an_earlier_item_change(tmp, autojump_clock):
    """8.8: a client holding a running tool call (seq 1) gets it again once it completed, by following
    `next_since` — with `since=<seq>` it never came back."""
    async with lab(tmp) as (pane, b, client):
        tool = pane.tool("t1", "grep", "Searching")
        pane.reply("looking")
        await settle(b)
        first = await get(client, "?since=0")
        assert [(i["seq"], i["kind"]) for i in first["items"]] == [(1, "tool"), (2, "reply")]
        assert first["items"][0]["status"] == "running" and first["more"] is False
        tool.update(status="completed", output="3 matches")
        await settle(b)
        nxt = await get(client, f"?since={first['next_since']}")
        assert [(i["seq"], i["status"]) for i in nxt["items"]] == [(1, "completed")]
        assert (await get(client, f"?since={nxt['next_since']}"))["items"] == []


async def test_a_long_conversation_comes_in_bounded_pages(tmp, autojump_clock):
    """9.6: an answer holds at most `limit` items; following `next_since` while `more` gives every item
    once; a bad `limit` or `since` is a 400 with a reason."""
    async with lab(tmp) as (pane, b, client):
        for n in range(450):
            pane.reply(f"line {n}")
        while b.readers["desk"].items_since("c") < 450:  # a page this big is parsed in a worker thread
            await b.wait_changed()
        seqs, since, answers = [], 0, 0
        while True:
            page = await get(client, f"?since={since}&limit=100")
            answers += 1
            assert len(page["items"]) <= 100
            seqs += [i["seq"] for i in page["items"]]
            since = page["next_since"]
            if not page["more"]:
                break
        assert seqs == list(range(1, 451)) and answers == 5
        for query in ("?limit=0", "?limit=x", "?since=-1", "?since=1e3"):
            resp = await client.get(ROUTE + query, headers={"authorization": f"Bearer {TOKEN}"})
            assert resp.status_code == 400 and (await resp.get_json())["error"] == "bad_request"

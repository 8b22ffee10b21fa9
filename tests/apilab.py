"""The lead's phone API in one trio run: a real SDK agent on a socket, the bridge, the writer, the hub
and the inbox, driven through quart-trio's test client — so a test takes the documented API path
(the inbox included) on virtual time (autojump_clock)."""

from __future__ import annotations

import json
import uuid
from contextlib import asynccontextmanager

import attrs
import trio

from collie.bridge.writer import Writer
from collie.crew import crewwire
from collie.crew.config import AgentConfig
from collie.crew.paths import Paths
from collie.lead.door.http import create_app
from collie.lead.inbox.service import Inbox
from collie.lead.members.hub import Hub
from collie.lead.members.refusals import Refusals
from collie.lead.members.session import Member
from collie.lead.routes.api import create_api
from collie.lead.routes.inbox import register as install_inbox_routes
from tests.livelab import InlineJournal, bridge_for

TOKEN = "t" * 64


class InlineInbox(Inbox):
    """The inbox's SQL run inline too (it commits in a worker thread, which virtual time cannot wait for)."""

    async def _db(self, fn, *args):
        await trio.lowlevel.checkpoint()
        return fn(*args)


class InlineRefusals(Refusals):
    """The lead's memory of its refusals with its SQL inline (no worker thread): virtual times stay exact."""

    async def run(self, fn, *args):
        await trio.lowlevel.checkpoint()
        return fn(*args)


def rid() -> str:
    return str(uuid.uuid4())


@attrs.define
class Lab:
    client: object
    bridge: object
    writer: Writer
    hub: Hub
    inbox: Inbox

    async def get(self, path: str):
        return await self.client.get(path, headers={"authorization": f"Bearer {TOKEN}"})

    async def post(self, path: str, body):
        return await self.client.post(path, json=body, headers={"authorization": f"Bearer {TOKEN}"})

    async def post_json(self, path: str, body) -> dict:
        response = await self.post(path, body)
        assert response.status_code == 200, (response.status_code, await response.get_data())
        return await response.get_json()


@asynccontextmanager
async def api_lab(tmp, agents: list[AgentConfig], *, ready: tuple[str, ...] | None = None):
    """The API over real agents; waits until the agents named in `ready` (default: all) are ready."""
    async with bridge_for(agents, tmp) as b:
        w = Writer(b, InlineJournal(tmp / "journal.sqlite"))
        paths = Paths(config_dir=tmp / "cfg", state_dir=tmp / "state")
        paths.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        hub = Hub(paths, b, w, refusals=InlineRefusals(paths.state_dir / "refusals.sqlite"))
        inbox = InlineInbox(paths.state_dir / "inbox.sqlite", hub, w)
        app = create_app(lambda a: (create_api(a, b, w, TOKEN, hub, inbox=inbox), install_inbox_routes(a, hub, inbox)))
        async with trio.open_nursery() as n:
            await n.start(w.recover)
            n.start_soon(inbox.run)
            for name in ready if ready is not None else [a.name for a in agents]:
                while b.status(name).status != "ready":
                    await b.wait_changed()
            yield Lab(app.test_client(), b, w, hub, inbox)
            n.cancel_scope.cancel()


class FakeLink:
    """A member's link as the hub sees it (`collie.lead.members.hub.Conn`): records the requests the lead forwards
    and answers each after `delay` seconds with the receipt `answer(msg)` returns; reads answer empty."""

    def __init__(self, answer, delay: float = 0.0) -> None:
        self.answer, self.delay = answer, delay
        self.calls: list[tuple[float, dict]] = []
        self.closed = trio.Event()

    async def call(self, msg: dict, timeout: float):
        """The answer frame as `Conn.call` returns it: parsed by the crew wire, or None on timeout."""
        if msg["type"] == "read":  # reads (recent sends, items) answer at once, empty
            return frame({"type": "read_result", "id": msg["id"], "ok": True,
                          "result": {"lines": [], "items": [], "open": True}})
        self.calls.append((trio.current_time(), msg))
        with trio.move_on_after(timeout):
            await trio.sleep(self.delay)
            return frame({"type": "receipt", "id": msg["id"], "receipt": self.answer(msg)})
        return None

    async def send(self, msg: dict) -> None:
        pass


def add_member(hub: Hub, label: str, link: FakeLink, views: list[dict]) -> Member:
    """A member online through `link`, its agents' raw hello and state as its bridge read them."""
    member = hub.members[label] = Member(label)
    member.conn = link
    hub._install_views(member, views, trio.current_time())
    return member


def frame(msg: dict):
    return crewwire.parse_member_frame(json.dumps(msg))[1]

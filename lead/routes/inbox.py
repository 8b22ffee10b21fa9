"""Features I3–I10: the inbox for the owner and for external senders (I10).

A sender (an API token) sees and touches only its own items — another sender's item is not even said
to exist — and may enqueue, list, read, cancel or add a message; approving, moving and clearing are
the owner's. A change the inbox made in memory but could not write to disk answers 507.
"""

from __future__ import annotations

import attrs
from quart import g, jsonify

from collie.lead.door.policy import open_to_senders
from collie.lead.inbox.core import TextTooLong
from collie.lead.inbox.core import item_id as scoped_id
from collie.lead.inbox.store import STORE_ERRORS
from collie.lead.routes import rules
from collie.lead.routes.bodies import inbox_request, message_text, move_index
from collie.lead.routes.common import body, error, no_agent
from collie.lead.routes.rules import OWNER, _id


def register(app, hub, inbox) -> None:
    """Features I3–I10: the inbox for the owner and for external senders (I10)."""

    def sender_name() -> str | None:
        return rules.sender_name(g.sender)

    @app.get("/api/agents/<machine>/<agent>/inbox")
    @open_to_senders
    async def inbox_list(machine: str, agent: str):
        """Waiting and running items in the order they will run, then finished ones (kept 24 h), newest first."""
        items = inbox.listing(machine, agent, sender_name(), owner=g.sender == OWNER)
        return jsonify({"items": inbox.views(items)})

    @app.post("/api/agents/<machine>/<agent>/inbox")
    @open_to_senders
    async def inbox_submit(machine: str, agent: str):
        data = await body()
        if not inbox.knows(machine, agent):
            return no_agent(machine, agent)
        req = inbox_request(data, agent)
        rec = await inbox.submit(machine, req, sender=sender_name(), approval=g.sender[1])
        return jsonify({**attrs.asdict(rec), "item": scoped_id(sender_name(), req.request_id)})

    async def act(item_id: str, fn, *, owner_only: bool):
        _id(item_id, "the inbox item id")  # a malformed id is the caller's mistake (400), not a missing item
        item = None
        if g.sender != OWNER:  # a sender may name its items by its own request ids
            item = await inbox.get(scoped_id(sender_name(), item_id))
        item = item or await inbox.get(item_id)
        refused = rules.inbox_refusal(g.sender, item, item_id, owner_only=owner_only)
        if refused is not None:  # another sender's item is not even said to exist
            return error(*refused)
        try:
            return await fn(item)
        except STORE_ERRORS:
            return not_on_disk()

    def not_on_disk():
        """An owner's or sender's change made in memory that the inbox could not write to disk yet."""
        return error(507, "disk_full", "the change is made, but the state folder's disk is full so it is not on disk "
                                       "yet: it is written once there is space (a restart of the lead before then "
                                       "would undo it)")

    @app.get("/api/inbox/<item_id>")
    @open_to_senders
    async def inbox_item(item_id: str):
        async def fn(item):
            return jsonify(inbox.view(item))
        return await act(item_id, fn, owner_only=False)

    @app.post("/api/inbox/<item_id>/approve")
    async def inbox_approve(item_id: str):
        async def fn(item):
            return jsonify(inbox.view(await inbox.approve(item)))
        return await act(item_id, fn, owner_only=True)

    @app.post("/api/inbox/<item_id>/cancel")
    @open_to_senders
    async def inbox_cancel(item_id: str):
        async def fn(item):
            return jsonify(inbox.view(await inbox.cancel(item)))
        return await act(item_id, fn, owner_only=False)

    @app.post("/api/inbox/<item_id>/move")
    async def inbox_move(item_id: str):
        index = move_index(await body())

        async def fn(item):
            return jsonify(inbox.view(await inbox.move(item, index)))
        return await act(item_id, fn, owner_only=True)

    @app.post("/api/inbox/<item_id>/message")
    @open_to_senders
    async def inbox_message(item_id: str):
        text = message_text(await body())

        async def fn(item):
            try:
                changed = await inbox.message(item, text)
            except TextTooLong as exc:
                return error(400, "bad_request", str(exc))
            if changed is None:
                return error(409, "not_waiting", f"the item is {item.state}: only a waiting send takes a message")
            return jsonify(inbox.view(changed))
        return await act(item_id, fn, owner_only=False)

    @app.post("/api/agents/<machine>/<agent>/inbox/clear")
    async def inbox_clear(machine: str, agent: str):
        if g.sender != OWNER:
            return error(403, "forbidden", "only the owner may clear the inbox")
        try:
            return jsonify({"cancelled": await inbox.clear(machine, agent)})
        except STORE_ERRORS:
            return not_on_disk()

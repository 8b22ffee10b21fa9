"""Reads: the dashboard, an agent's conversations (open and closed), a pane, its items, the starters,
and the viewing lease (phone-api.md). A member's agent is read through the hub; X1 masks what is shown."""

from __future__ import annotations

from quart import jsonify, request

from collie.bridge.bridge import FOOTER_NO_ANSWER
from collie.bridge.client import AgentUnreachable
from collie.bridge.panes import chat_items, conversation_rows, masked_pane, pane_state
from collie.bridge.reader import PAGE_LIMIT, PAGE_LIMIT_MAX, newest_of
from collie.crew.receipts import NO_STARTERS
from collie.lead.inbox.service import with_waiting
from collie.lead.routes.bodies import viewing_on
from collie.lead.routes.common import _query_int, body, error, masked_rows, no_agent, reader_lookup
from collie.lead.routes.rules import LOCAL, _id


def register(app, bridge, writer, hub=None, *, feed=None, redact_on: bool = True, inbox=None) -> None:
    """Add the read routes (and the viewing lease) to `app`."""
    reader_of = reader_lookup(bridge, hub)

    @app.get("/api/dashboard")
    async def dashboard():
        """D1, D5: the lead's own agents (no machine named), then one section per member."""
        from collie.lead.feed.dashboard import dashboard_json

        return app.response_class(dashboard_json(bridge, hub), mimetype="application/json")

    @app.get("/api/agents/<machine>/<agent>/conversations")
    async def conversations(machine: str, agent: str):
        reader = reader_of(machine, agent)
        if reader is None:
            return no_agent(machine, agent)
        if request.args.get("closed"):
            if machine != LOCAL:
                got = await hub.read(machine, agent, "closed", {"cursor": request.args.get("cursor")})
                if got is None:
                    return jsonify({"closed": [], "next": None, "footer": FOOTER_NO_ANSWER, "reason": "machine-offline"})
                if isinstance(got, dict) and isinstance(got.get("closed"), list):
                    got = {**got, "closed": masked_rows(got["closed"], redact_on)}
                return jsonify(got)
            got = await bridge.read_closed(agent, request.args.get("cursor"))
            return jsonify({"closed": masked_rows(got.conversations, redact_on), "next": got.next, "footer": got.footer,
                            "reason": got.reason})
        warning = bridge.warning(agent) if machine == LOCAL else (
            reader.detail if reader.status == "version_mismatch" else None)
        caps = list(reader.hello.caps) if reader.hello else []
        return jsonify({"open": masked_rows(conversation_rows(reader), redact_on),
                        "left_out": getattr(reader, "left_out", 0), "status": reader.status, "warning": warning,
                        "caps": caps})

    @app.get("/api/agents/<machine>/<agent>/conversations/<conv>")
    async def pane(machine: str, agent: str, conv: str):
        reader = reader_of(machine, agent)
        conv = _id(conv, "conversation")
        if reader is None:
            return no_agent(machine, agent)
        if machine == LOCAL:
            recent = writer.recent_sends(agent, conv)
        else:
            recent = ((await hub.read(machine, agent, "recent_sends", {"conversation": conv})) or {}).get("lines", [])
        recent = with_waiting(recent, inbox, machine, agent, conv)
        member = hub.members.get(machine) if machine != LOCAL and hub is not None else None
        state = pane_state(reader, conv, recent_sends=recent, machine=machine, online=member is None or member.online)
        if state is None:
            return error(404, "not_found", f"no open conversation {conv!r}")
        return jsonify(masked_pane(state, redact_on))

    @app.get("/api/agents/<machine>/<agent>/conversations/<conv>/items")
    async def items(machine: str, agent: str, conv: str):
        """Items by revision, one bounded page (issues 8.8, 9.6): follow `next_since` while `more`. Or, with
        `newest=N` (issue 39), the newest N by position (`before=SEQ`: the N above that seq), in one read."""
        reader = reader_of(machine, agent)
        conv = _id(conv, "conversation")
        if reader is None:
            return no_agent(machine, agent)
        newest = _query_int("newest", 0, 1, PAGE_LIMIT_MAX) if request.args.get("newest") is not None else None
        before = _query_int("before", 0, 1) if request.args.get("before") is not None else None
        if newest is None and before is not None:
            return error(400, "bad_request", "before goes with newest: ?newest=200&before=SEQ")
        if newest is not None and request.args.get("since") is not None:
            return error(400, "bad_request", "since and newest are two ways to page: give one of them")
        if newest is not None:
            return await newest_items(machine, agent, conv, reader, newest, before)
        since = _query_int("since", 0, 0)
        limit = _query_int("limit", PAGE_LIMIT, 1, PAGE_LIMIT_MAX)
        if machine != LOCAL:
            got = await hub.read(machine, agent, "items", {"conversation": conv, "since": since, "limit": limit})
            if got is None:
                return jsonify({"items": [], "open": conv in reader.conversations, "next_since": since, "more": False,
                                "footer": FOOTER_NO_ANSWER, "reason": "machine-offline"})
            got.pop("earlier", None)
            if got.get("next_since") is None:  # a member that answers one plain page: the highest rev it sent
                sent = [i.get("rev", 0) for i in got.get("items", []) if i.get("kind") != "gap"]
                got["next_since"] = max([since, *sent])
                got["more"] = len(sent) >= PAGE_LIMIT
            return jsonify(got)
        tapped = await writer.journal.run(writer.journal.tapped_asks, agent)
        if conv in reader.conversations:
            page = bridge.items_page(agent, conv, since, limit)
            return jsonify({**page, "items": chat_items(page["items"], tapped), "open": True})
        try:
            page = await bridge.read_items_page(agent, conv, since, limit)
        except AgentUnreachable as exc:
            if exc.reason == "not_found":
                return error(404, "not_found", f"no conversation {conv!r}")
            return jsonify({"items": [], "open": False, "next_since": since, "more": False, "footer": FOOTER_NO_ANSWER,
                            "reason": exc.reason})
        return jsonify({**page, "items": chat_items(page["items"], tapped), "open": False})

    async def newest_items(machine, agent, conv, reader, newest, before):
        if machine != LOCAL:
            args = {"conversation": conv, "newest": newest, **({"before": before} if before else {})}
            got = await hub.read(machine, agent, "items", args)
            if got is None:
                return jsonify({"items": [], "open": conv in reader.conversations, "next_since": 0, "more": False,
                                "earlier": None, "footer": FOOTER_NO_ANSWER, "reason": "machine-offline"})
            if got.get("next_since") is None:  # an older member read the oldest page by revision instead
                sent = [i.get("rev", 0) for i in got.get("items", []) if i.get("kind") != "gap"]
                got["next_since"] = max([0, *sent])
            return jsonify({**got, "more": False})
        tapped = await writer.journal.run(writer.journal.tapped_asks, agent)
        if conv in reader.conversations:
            page = bridge.items_newest(agent, conv, newest, before)
            return jsonify({**page, "items": chat_items(page["items"], tapped), "open": True})
        try:
            page = newest_of(await bridge.read_items_through(agent, conv), newest, before)
        except AgentUnreachable as exc:
            if exc.reason == "not_found":
                return error(404, "not_found", f"no conversation {conv!r}")
            return jsonify({"items": [], "open": False, "next_since": 0, "more": False, "earlier": None,
                            "footer": FOOTER_NO_ANSWER, "reason": exc.reason})
        return jsonify({**page, "items": chat_items(page["items"], tapped), "open": False})

    @app.get("/api/agents/<machine>/<agent>/starters")
    async def starters(machine: str, agent: str):
        reader = reader_of(machine, agent)
        if reader is None:
            return no_agent(machine, agent)
        offered = reader.hello is not None and "starters" in reader.hello.caps and bool(reader.starters)
        return jsonify({"title": "New conversation", "starters": reader.starters if offered else [],
                        "empty": None if offered else NO_STARTERS})

    @app.post("/api/agents/<machine>/<agent>/viewing")
    async def viewing(machine: str, agent: str):
        if reader_of(machine, agent) is None:
            return no_agent(machine, agent)
        on = viewing_on(await body())  # {}, "yes", 1, null: a wrong type is a 400, never a silent "off" (issue 25)
        if feed is not None:  # a lease: it lapses unless repeated (W5), see collie.lead.feed.events.LEASE
            await feed.lease_view(machine, agent, on)
            return jsonify({"ok": True, "lease_seconds": 60})
        if machine == LOCAL:
            bridge.set_viewing(agent, on)
        else:
            await hub.set_viewing(machine, agent, on)
        return jsonify({"ok": True})

"""The lead's JSON API for the phone (shared/spec/phone-api.md; documented in docs/phone-api.md).

Every `/api` route needs the local API credential as `Authorization: Bearer <token>` (until phones
can pair): a 32-byte random token the lead makes at first start, kept in `<state>/api-token` (0600)
and compared in constant time. No `/api` route answers anyone else — a local process must not be
able to answer an agent's ask. An API token (features I10) opens only the inbox routes marked
`@open_to_senders`: the door (`lead.door`) authorizes the route that matched, never the path text.
Writes answer 200 with a receipt (a refusal is a receipt too); malformed requests answer 400, unknown
routes, machines, agents or conversations 404 — every error as JSON `{"error", "message"}`.
"""

from __future__ import annotations

import os
import secrets
import time

import attrs
import trio
from quart import Quart, g, has_request_context, jsonify, request
from werkzeug.exceptions import HTTPException
from werkzeug.routing import RequestRedirect

from bridge.bridge import FOOTER_NO_ANSWER, Bridge
from bridge.client import AgentUnreachable
from bridge.panes import chat_items, conversation_rows, masked_pane, pane_state
from bridge.reader import PAGE_LIMIT, PAGE_LIMIT_MAX
from bridge.writer import Writer
from bridge.writes import WriteRequest
from crew import logs
from crew.fsutil import atomic_write
from crew.paths import Paths
from crew.receipts import NO_STARTERS
from crew.security import bearer_token, same_secret
from lead.door import BodyRefused, open_to_senders, opens_to_senders, parse_body
from lead.inbox import STORE_ERRORS, TextTooLong
from lead.inbox import item_id as scoped_id

log = logs.get("api")

LOCAL = "local"  # the lead's own machine in routes; members use their labels (crew.md)
OWNER = ("owner", "standing")
MAX_BODY = 256 * 1024
ID_MAX = 128


def load_or_create_credential(paths: Paths) -> tuple[str, bool]:
    """The local API credential; (token, created). Never logged or printed."""
    path = paths.state_dir / "api-token"
    try:
        token = path.read_text().strip()
        if len(token) >= 64:
            if (path.stat().st_mode & 0o777) != 0o600:
                os.chmod(path, 0o600)
            return token, False
    except FileNotFoundError:
        pass
    token = secrets.token_hex(32)
    atomic_write(path, (token + "\n").encode(), mode=0o600)
    return token, True


class BadRequest(Exception):
    pass


def _id(value, what: str) -> str:
    """The wire's id rule (§1): 1-128 printable ASCII characters, no `/`; and never `.` or `..`,
    which a URL would read as a step. Checked before an id is looked up or reaches an agent."""
    if (not isinstance(value, str) or not 1 <= len(value) <= ID_MAX or "/" in value or value in (".", "..")
            or not all(" " <= ch <= "~" for ch in value)):
        raise BadRequest(f"{what} must be 1-{ID_MAX} printable ASCII characters, without '/', and not '.' or '..'")
    return value


def _int(value, what: str) -> int | None:
    if value is None:
        return None
    if type(value) is not int:
        raise BadRequest(f"{what} must be an integer")
    return value


def _turn(value) -> int:
    """Steer, Stop and agent buttons act on the turn the phone saw (wire §6, B7, C7): required."""
    if value is None:
        raise BadRequest("turn is required: the turn the phone saw (so a tap never acts on a later turn)")
    return _int(value, "turn")


def _query_int(name: str, default: int, low: int, high: int | None = None) -> int:
    """A whole-number query parameter within [low, high] (clamped above), or 400."""
    raw = request.args.get(name)
    if raw is None:
        return default
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise BadRequest(f"{name} must be a whole number")
    value = int(raw)
    if value < low:
        raise BadRequest(f"{name} must be at least {low}")
    return min(value, high) if high is not None else value


def masked_rows(rows: list, on: bool) -> list:
    """X1: titles and subtitles of a conversation list with secrets masked (when redaction is on)."""
    if not on:
        return rows
    from crew.redact import redact

    return [{**r, **{k: redact(r[k]) for k in ("title", "subtitle", "line") if isinstance(r.get(k), str)}}
            if isinstance(r, dict) else r for r in rows]


def create_api(app: Quart, bridge: Bridge, writer: Writer, credential: str, hub=None, *, door=None,
               devices=None, feed=None, redact_on: bool = True) -> None:
    """Add the /api routes to `app`. `hub` (lead.hub.Hub) routes members' machines; `door`
    (lead.pairing.Door) guards Host and Origin; `devices` (lead.devices.Devices) knows paired phones."""
    from lead.http import trust_connection
    from lead.pairing import PHONE_NOT_SIGNED_IN, csrf_ok, device_of, guard, presented_cookies, secure_headers

    if hub is not None:
        from quart import websocket

        @app.before_websocket
        async def trust_members():
            """A member's link with a valid member token: a trusted connection (lead.connections)."""
            token = bearer_token(websocket.headers.get("authorization", ""))
            if token and hub.store.member_for(token):
                trust_connection()
    if feed is not None:
        feed.redact_on = redact_on  # X1: the live channel's panes are masked like this API's

    def error(status: int, code: str, message: str):
        return jsonify({"error": code, "message": message}), status

    def is_api(path: str) -> bool:
        return path == "/api" or path.startswith("/api/")

    @app.before_request
    async def authenticate():
        """The door: Host and Origin (lead.pairing), the credential — the local one, a paired phone's
        cookie with its CSRF header, or an inbox API token — then the matched route and the body
        (lead.door; issues 9.2, 9.10, 11.2)."""
        g.sender = None
        g.device = None
        g.body = None
        if door is not None:
            refused = guard(door)
            if refused is not None:
                return refused
        if not is_api(request.path):  # pages, pairing (`POST /pair`: the code is the credential), /healthz
            return None
        header = request.headers.get("authorization", "")
        given = bearer_token(header)
        why = None
        if given and same_secret(given, credential):
            g.sender = OWNER
        elif not given and devices is not None:
            dev, why = device_of(devices, time.time())  # the cookie with its device key or live ticket (issue 25.1)
            if dev is not None:
                if not csrf_ok():
                    return error(403, "csrf", "a write from the phone needs the header X-Collie-CSRF: 1")
                g.sender, g.device = OWNER, dev.id
                if devices.seen(dev, time.time()):
                    await trio.to_thread.run_sync(devices.write_seen, dev)
        elif given and hub is not None:
            g.sender = hub.store.token_for(given)  # an external sender's API token (features I10)
        if g.sender is None:
            if why is None and not given and devices is not None and presented_cookies():
                why = PHONE_NOT_SIGNED_IN  # a phone's cookie without its own device key: the phone must pair again
            return error(401, "unauthorized", why or "this route needs the API credential (Authorization: Bearer …)")
        trust_connection()  # its connection keeps its place in the budget (lead.connections, issue 25.4)
        if isinstance(request.routing_exception, RequestRedirect):  # `//` or a trailing `/`: no such route
            return error(404, "not_found", f"no route {request.method} {request.path[:200]!r}: see docs/phone-api.md")
        if request.routing_exception is not None:
            return None  # Quart raises it next: a JSON 404 or 405 below
        if g.sender != OWNER and not opens_to_senders(app.view_functions.get(request.endpoint)):
            return error(403, "forbidden", "an API token opens only the inbox routes (features I10)")
        if request.content_length is not None and request.content_length > MAX_BODY:
            return error(413, "too_large", f"the body is over {MAX_BODY} bytes")
        try:
            g.body = parse_body(await request.get_data())  # the one parse: handlers read g.body (issue 25.9)
        except BodyRefused as exc:
            return error(400, "bad_request", str(exc))
        return None

    @app.errorhandler(BadRequest)
    async def bad_request(exc):
        return error(400, "bad_request", str(exc))

    http_codes = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 408: "timeout", 413: "too_large"}

    @app.errorhandler(HTTPException)
    async def http_error(exc: HTTPException):
        if not has_request_context():
            return exc  # a websocket (the members' link): Quart's own answer
        if not is_api(request.path):  # a page or /pair: JSON too, with the pages' guard headers (issue 25)
            resp, status = error(exc.code or 500, http_codes.get(exc.code, "http_error"),
                                 f"no page {request.path[:200]!r}" if exc.code == 404 else
                                 f"the body is over {MAX_BODY} bytes" if exc.code == 413 else
                                 (exc.description or exc.name))
            secure_headers(resp)
            resp.headers["Content-Security-Policy"] = "default-src 'none'; frame-ancestors 'none'"
            return resp, status
        if exc.code == 404:
            return error(404, "not_found", f"no route {request.method} {request.path[:200]!r}: see docs/phone-api.md")
        if exc.code == 405:
            return error(405, "method_not_allowed", f"{request.path[:200]!r} does not take {request.method}")
        if exc.code == 413:
            return error(413, "too_large", f"the body is over {MAX_BODY} bytes")
        return error(exc.code or 500, http_codes.get(exc.code, "http_error"), exc.description or exc.name)

    @app.errorhandler(Exception)
    async def internal_error(exc: Exception):
        """A defect, never bad input (the door refuses that): one escaped log line, a JSON 500."""
        if not has_request_context():
            raise exc  # a websocket (the members' link): Quart's own handling
        log.error("[api] %s %r failed: %s %r", request.method, request.path[:200], type(exc).__name__, str(exc)[:200])
        return error(500, "internal", "the lead failed on this request; the log has one line about it")

    def reader_of(machine: str, agent: str):
        machine, agent = _id(machine, "machine"), _id(agent, "agent")  # 400 before any lookup (issue 9.13)
        if machine == LOCAL:
            return bridge.readers.get(agent)
        return hub.reader(machine, agent) if hub is not None else None

    async def body() -> dict:
        data = g.get("body")  # parsed by the door, strictly (lead.door.parse_body)
        if not isinstance(data, dict):
            raise BadRequest("the body must be a JSON object")
        return data

    async def run_write(req: WriteRequest, machine: str = LOCAL):
        inbox = hub.inbox if hub is not None else None
        if inbox is not None and req.op in ("send", "starter"):
            rec = await inbox.submit(machine, req, sender=None)  # I1: every send and starter passes the inbox
        elif machine == LOCAL:
            rec = await writer.write(req)
        else:
            rec = await hub.write(machine, req)
        return jsonify(attrs.asdict(rec))

    # --- reads --------------------------------------------------------------------------------
    @app.get("/api/dashboard")
    async def dashboard():
        """D1, D5: the lead's own agents (no machine named), then one section per member."""
        from lead.events import dashboard_json

        return app.response_class(dashboard_json(bridge, hub), mimetype="application/json")

    @app.get("/api/agents/<machine>/<agent>/conversations")
    async def conversations(machine: str, agent: str):
        reader = reader_of(machine, agent)
        if reader is None:
            return error(404, "not_found", f"no durable agent {agent!r} on {machine!r}")
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
            return error(404, "not_found", f"no durable agent {agent!r} on {machine!r}")
        if machine == LOCAL:
            recent = writer.recent_sends(agent, conv)
        else:
            recent = ((await hub.read(machine, agent, "recent_sends", {"conversation": conv})) or {}).get("lines", [])
        member = hub.members.get(machine) if machine != LOCAL and hub is not None else None
        state = pane_state(reader, conv, recent_sends=recent, machine=machine, online=member is None or member.online)
        if state is None:
            return error(404, "not_found", f"no open conversation {conv!r}")
        return jsonify(masked_pane(state, redact_on))

    @app.get("/api/agents/<machine>/<agent>/conversations/<conv>/items")
    async def items(machine: str, agent: str, conv: str):
        """Items by revision, one bounded page (issues 8.8, 9.6): follow `next_since` while `more`."""
        reader = reader_of(machine, agent)
        conv = _id(conv, "conversation")
        if reader is None:
            return error(404, "not_found", f"no durable agent {agent!r} on {machine!r}")
        since = _query_int("since", 0, 0)
        limit = _query_int("limit", PAGE_LIMIT, 1, PAGE_LIMIT_MAX)
        if machine != LOCAL:
            got = await hub.read(machine, agent, "items", {"conversation": conv, "since": since, "limit": limit})
            if got is None:
                return jsonify({"items": [], "open": conv in reader.conversations, "next_since": since, "more": False,
                                "footer": FOOTER_NO_ANSWER, "reason": "machine-offline"})
            if "next_since" not in got:  # a member that answers one plain page: the highest rev it sent
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

    @app.get("/api/agents/<machine>/<agent>/starters")
    async def starters(machine: str, agent: str):
        reader = reader_of(machine, agent)
        if reader is None:
            return error(404, "not_found", f"no durable agent {agent!r} on {machine!r}")
        offered = reader.hello is not None and "starters" in reader.hello.caps and bool(reader.starters)
        return jsonify({"title": "New conversation", "starters": reader.starters if offered else [],
                        "empty": None if offered else NO_STARTERS})

    @app.post("/api/agents/<machine>/<agent>/viewing")
    async def viewing(machine: str, agent: str):
        if reader_of(machine, agent) is None:
            return error(404, "not_found", f"no durable agent {agent!r} on {machine!r}")
        on = (await body()).get("on")
        if not isinstance(on, bool):  # {}, "yes", 1, null: a wrong type is a 400, never a silent "off" (issue 25)
            raise BadRequest('on must be true or false: {"on": true}')
        if feed is not None:  # a lease: it lapses unless repeated (W5), see lead.events.LEASE
            await feed.lease_view(machine, agent, on)
            return jsonify({"ok": True, "lease_seconds": 60})
        if machine == LOCAL:
            bridge.set_viewing(agent, on)
        else:
            await hub.set_viewing(machine, agent, on)
        return jsonify({"ok": True})

    # --- writes -------------------------------------------------------------------------------
    def target(data: dict) -> tuple[str, str]:
        machine = _id(data.get("machine", LOCAL), "machine")
        agent = _id(data.get("agent"), "agent")
        return machine, agent

    @app.post("/api/send")
    async def send():
        data = await body()
        machine, agent = target(data)
        if reader_of(machine, agent) is None:
            return error(404, "not_found", f"no durable agent {agent!r} on {machine!r}")
        text = data.get("text")
        if not isinstance(text, str):
            raise BadRequest("text must be a string")
        return await run_write(WriteRequest(
            request_id=_id(data.get("request_id"), "request_id"), op="send", agent=agent,
            conversation=_id(data.get("conversation"), "conversation"), text=text, turn=_int(data.get("turn"), "turn")),
            machine)

    @app.post("/api/ask/<ask_id>")
    async def answer(ask_id: str):
        ask_id = _id(ask_id, "ask id")
        data = await body()
        machine, agent = target(data)
        if reader_of(machine, agent) is None:
            return error(404, "not_found", f"no durable agent {agent!r} on {machine!r}")
        ans = data.get("answer")
        if not isinstance(ans, dict):
            raise BadRequest('answer must be an object: {"option_ids": [...]}, {"text": "..."} or {"fields": {...}}')
        option_ids = ans.get("option_ids")
        if option_ids is not None and (not isinstance(option_ids, list) or not all(isinstance(o, str) for o in option_ids)):
            raise BadRequest("answer.option_ids must be a list of strings")
        if ans.get("text") is not None and not isinstance(ans.get("text"), str):
            raise BadRequest("answer.text must be a string")
        if ans.get("fields") is not None and not isinstance(ans.get("fields"), dict):
            raise BadRequest("answer.fields must be an object")
        digest = data.get("digest")
        if not isinstance(digest, str):
            raise BadRequest("digest must be the digest of the ask you saw")
        return await run_write(WriteRequest(
            request_id=_id(data.get("request_id"), "request_id"), op="answer", agent=agent,
            ask_id=ask_id, digest=digest, option_ids=option_ids, answer_text=ans.get("text"),
            fields=ans.get("fields"), confirmed=data.get("confirmed") is True), machine)

    async def session_write(machine: str, agent: str, conv: str, op: str, **extra):
        conv = _id(conv, "conversation")
        if reader_of(machine, agent) is None:
            return error(404, "not_found", f"no durable agent {agent!r} on {machine!r}")
        data = await body()
        fields = {}
        if op in ("steer", "abort", "action"):
            fields["turn"] = _turn(data.get("turn"))
        if op in ("steer",):
            if not isinstance(data.get("text"), str):
                raise BadRequest("text must be a string")
            fields["text"] = data["text"]
        if op == "rename":
            if not isinstance(data.get("title"), str):
                raise BadRequest("title must be a string")
            fields["title"] = data["title"]
        return await run_write(WriteRequest(
            request_id=_id(data.get("request_id"), "request_id"), op=op, agent=agent, conversation=conv,
            **fields, **extra), machine)

    @app.post("/api/agents/<machine>/<agent>/conversations/<conv>/steer")
    async def steer(machine: str, agent: str, conv: str):
        return await session_write(machine, agent, conv, "steer")

    @app.post("/api/agents/<machine>/<agent>/conversations/<conv>/stop")
    async def stop(machine: str, agent: str, conv: str):
        return await session_write(machine, agent, conv, "abort")

    @app.post("/api/agents/<machine>/<agent>/conversations/<conv>/actions/<action_id>")
    async def action(machine: str, agent: str, conv: str, action_id: str):
        action_id = _id(action_id, "action")
        return await session_write(machine, agent, conv, "action", action_id=action_id)

    @app.post("/api/agents/<machine>/<agent>/conversations/<conv>/rename")
    async def rename(machine: str, agent: str, conv: str):
        return await session_write(machine, agent, conv, "rename")

    @app.post("/api/agents/<machine>/<agent>/conversations/<conv>/close")
    async def close(machine: str, agent: str, conv: str):
        return await session_write(machine, agent, conv, "close")

    @app.post("/api/agents/<machine>/<agent>/conversations/<conv>/reopen")
    async def reopen(machine: str, agent: str, conv: str):
        return await session_write(machine, agent, conv, "reopen")

    @app.post("/api/agents/<machine>/<agent>/starters/<starter_id>")
    async def start(machine: str, agent: str, starter_id: str):
        starter_id = _id(starter_id, "starter")
        if reader_of(machine, agent) is None:
            return error(404, "not_found", f"no durable agent {agent!r} on {machine!r}")
        data = await body()
        return await run_write(WriteRequest(request_id=_id(data.get("request_id"), "request_id"), op="starter",
                                            agent=agent, starter_id=starter_id), machine)


def install_inbox_routes(app: Quart, hub, inbox) -> None:
    """Features I3–I10: the inbox for the owner and for external senders (I10)."""

    def error(status: int, code: str, message: str):
        return jsonify({"error": code, "message": message}), status

    def sender_name() -> str | None:
        return None if g.sender == OWNER else g.sender[0]

    def allowed(item) -> bool:
        return g.sender == OWNER or (item is not None and item.sender == g.sender[0])

    async def json_object() -> dict:
        data = g.get("body")  # parsed by the door, strictly (lead.door.parse_body)
        if not isinstance(data, dict):
            raise BadRequest("the body must be a JSON object")
        return data

    @app.get("/api/agents/<machine>/<agent>/inbox")
    @open_to_senders
    async def inbox_list(machine: str, agent: str):
        """Waiting and running items in the order they will run, then finished ones (kept 24 h), newest first."""
        items = inbox.listing(machine, agent, sender_name(), owner=g.sender == OWNER)
        return jsonify({"items": inbox.views(items)})

    @app.post("/api/agents/<machine>/<agent>/inbox")
    @open_to_senders
    async def inbox_submit(machine: str, agent: str):
        data = await json_object()
        if not inbox.knows(machine, agent):
            return error(404, "not_found", f"no durable agent {agent!r} on {machine!r}")
        starter = data.get("starter")
        text = data.get("text")
        if starter is None and not isinstance(text, str):
            raise BadRequest("give text (and conversation) for a send, or a starter id")
        req = WriteRequest(request_id=_id(data.get("request_id"), "request_id"),
                           op="starter" if starter is not None else "send", agent=_id(agent, "agent"),
                           conversation=_id(data.get("conversation"), "conversation") if starter is None else None,
                           text=text, turn=None, starter_id=_id(starter, "starter") if starter is not None else None)
        rec = await inbox.submit(machine, req, sender=sender_name(), approval=g.sender[1])
        return jsonify({**attrs.asdict(rec), "item": scoped_id(sender_name(), req.request_id)})

    async def act(item_id: str, fn, *, owner_only: bool):
        _id(item_id, "the inbox item id")  # a malformed id is the caller's mistake (400), not a missing item
        item = None
        if g.sender != OWNER:  # a sender may name its items by its own request ids
            item = await inbox.get(scoped_id(sender_name(), item_id))
        item = item or await inbox.get(item_id)
        if item is None or not allowed(item):  # another sender's item is not even said to exist
            return error(404, "not_found", f"no inbox item {item_id!r}")
        if owner_only and g.sender != OWNER:
            return error(403, "forbidden", "only the owner (or the item's sender, to cancel or add a message) may do that")
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
        data = await json_object()
        if type(data.get("index")) is not int:
            raise BadRequest("index must be an integer (0 = first in the queue)")

        async def fn(item):
            return jsonify(inbox.view(await inbox.move(item, data["index"])))
        return await act(item_id, fn, owner_only=True)

    @app.post("/api/inbox/<item_id>/message")
    @open_to_senders
    async def inbox_message(item_id: str):
        data = await json_object()
        if not isinstance(data.get("text"), str) or not data["text"].strip():
            raise BadRequest("text must be a non-empty string")

        async def fn(item):
            try:
                changed = await inbox.message(item, data["text"])
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

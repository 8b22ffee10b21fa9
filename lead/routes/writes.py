"""Writes: send, ask answers, steer, stop, agent buttons, rename, close, reopen, a new conversation.

Each answers 200 with a receipt (a refusal is a receipt too). Every send and starter passes the inbox
when there is one (I1); the rest go to the writer (the lead's own agents) or the hub (a member's).
"""

from __future__ import annotations

import attrs
from quart import jsonify

from bridge.writes import WriteRequest
from lead.routes.common import LOCAL, BadRequest, _id, _int, _turn, body, error, reader_lookup


def register(app, bridge, writer, hub=None) -> None:
    """Add the write routes to `app`."""
    reader_of = reader_lookup(bridge, hub)

    async def run_write(req: WriteRequest, machine: str = LOCAL):
        inbox = hub.inbox if hub is not None else None
        if inbox is not None and req.op in ("send", "starter"):
            rec = await inbox.submit(machine, req, sender=None)  # I1: every send and starter passes the inbox
        elif machine == LOCAL:
            rec = await writer.write(req)
        else:
            rec = await hub.write(machine, req)
        return jsonify(attrs.asdict(rec))

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

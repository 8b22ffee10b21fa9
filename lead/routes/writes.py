"""Writes: send, ask answers, steer, stop, agent buttons, rename, close, reopen, a new conversation.

Each answers 200 with a receipt (a refusal is a receipt too). Every send and starter passes the inbox
when there is one (I1); the rest go to the writer (the lead's own agents) or the hub (a member's).
"""

from __future__ import annotations

import attrs
from quart import jsonify

from collie.bridge.writes import WriteRequest
from collie.lead.routes.bodies import answer_request, send_request, session_request, starter_request, target
from collie.lead.routes.common import body, no_agent, reader_lookup
from collie.lead.routes.rules import LOCAL, _id


def register(app, bridge, writer, hub=None, stops=None, inbox=None) -> None:
    """Add the write routes to `app`. `stops` (collie.lead.push.turns.TurnPusher) is told of every Stop, and of its
    answer: the phone that stopped a turn is not told that it ended (issue 37). `inbox`: where every send and
    starter goes (I1), when the lead keeps one."""
    reader_of = reader_lookup(bridge, hub)

    async def run_write(req: WriteRequest, machine: str = LOCAL):
        return jsonify(attrs.asdict(await receipt_of(req, machine)))

    async def receipt_of(req: WriteRequest, machine: str = LOCAL):
        if inbox is not None and req.op in ("send", "starter"):
            rec = await inbox.submit(machine, req, sender=None)  # I1: every send and starter passes the inbox
        elif machine == LOCAL:
            rec = await writer.write(req)
        else:
            rec = await hub.write(machine, req)
        return rec

    @app.post("/api/send")
    async def send():
        data = await body()
        machine, agent = target(data)
        if reader_of(machine, agent) is None:
            return no_agent(machine, agent)
        return await run_write(send_request(data, agent), machine)

    @app.post("/api/ask/<ask_id>")
    async def answer(ask_id: str):
        ask_id = _id(ask_id, "ask id")
        data = await body()
        machine, agent = target(data)
        if reader_of(machine, agent) is None:
            return no_agent(machine, agent)
        return await run_write(answer_request(data, agent, ask_id), machine)

    async def session_write(machine: str, agent: str, conv: str, op: str, **extra):
        conv = _id(conv, "conversation")
        if reader_of(machine, agent) is None:
            return no_agent(machine, agent)
        data = await body()
        req = session_request(op, data, agent, conv, **extra)
        if op != "abort" or stops is None:
            return await run_write(req, machine)
        from quart import g

        stops.stopping(machine, agent, conv, req.turn, getattr(g, "device", None))
        rec = await receipt_of(req, machine)
        stops.stop_answered(machine, agent, conv, req.turn, rec.outcome)
        return jsonify(attrs.asdict(rec))

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
            return no_agent(machine, agent)
        data = await body()
        return await run_write(starter_request(data, agent, starter_id), machine)

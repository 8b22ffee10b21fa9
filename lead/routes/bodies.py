"""What each route's body must hold, and the request it makes: plain functions, no Quart, no trio.

Each takes the body the door parsed (collie.lead.door.policy.parse_body: a dict, or None when there was none) and the
path's parts the handler already checked, and returns what the handler passes on — a `WriteRequest`, a
flag, an index — or raises `BadRequest` naming the field and what to send instead. Nothing here looks
anything up: a handler checks the machine and agent exist (404) between `target` and the rest, so an
unknown agent is a 404 before its body's other fields are judged, as the API always answered.
"""

from __future__ import annotations

from collie.bridge.writes import WriteRequest
from collie.lead.routes.rules import LOCAL, BadRequest, _id, _int, _turn


def json_object(data) -> dict:
    """The body as a dict; no body (or one the door let through that is not an object) is a 400."""
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    return data


def target(data: dict) -> tuple[str, str]:
    """(machine, agent) a body names: the machine defaults to the lead's own (`local`)."""
    machine = _id(data.get("machine", LOCAL), "machine")
    agent = _id(data.get("agent"), "agent")
    return machine, agent


def send_request(data: dict, agent: str) -> WriteRequest:
    """`POST /api/send` (B2-B4): text, request_id, conversation; the turn the phone saw is optional."""
    text = data.get("text")
    if not isinstance(text, str):
        raise BadRequest("text must be a string")
    return WriteRequest(
        request_id=_id(data.get("request_id"), "request_id"), op="send", agent=agent,
        conversation=_id(data.get("conversation"), "conversation"), text=text, turn=_int(data.get("turn"), "turn"))


def answer_request(data: dict, agent: str, ask_id: str) -> WriteRequest:
    """`POST /api/ask/<ask_id>` (features O): an answer object, the digest of the ask the phone saw (the
    answer applies only to that ask), and `confirmed` true only when it is exactly `true`."""
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
    return WriteRequest(
        request_id=_id(data.get("request_id"), "request_id"), op="answer", agent=agent,
        ask_id=ask_id, digest=digest, option_ids=option_ids, answer_text=ans.get("text"),
        fields=ans.get("fields"), confirmed=data.get("confirmed") is True)


def session_request(op: str, data: dict, agent: str, conversation: str, **extra) -> WriteRequest:
    """A session route: steer, stop (`abort`) and agent buttons (`action`) quote the turn the phone saw
    (wire §6, B7, C7); steer carries its text, rename its title; close and reopen only the request id."""
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
    return WriteRequest(request_id=_id(data.get("request_id"), "request_id"), op=op, agent=agent,
                        conversation=conversation, **fields, **extra)


def starter_request(data: dict, agent: str, starter_id: str) -> WriteRequest:
    """`POST …/starters/<id>` (N1-N3): a new conversation needs only its request id."""
    return WriteRequest(request_id=_id(data.get("request_id"), "request_id"), op="starter",
                        agent=agent, starter_id=starter_id)


def viewing_on(data: dict) -> bool:
    """`POST …/viewing` (W5): `on` is true or false; any other value is a 400, never a silent "off" (issue 25)."""
    on = data.get("on")
    if not isinstance(on, bool):
        raise BadRequest('on must be true or false: {"on": true}')
    return on


def inbox_request(data: dict, agent: str) -> WriteRequest:
    """`POST …/inbox` (I3, I10): text and conversation for a send, or a starter id for a new conversation."""
    starter = data.get("starter")
    text = data.get("text")
    if starter is None and not isinstance(text, str):
        raise BadRequest("give text (and conversation) for a send, or a starter id")
    return WriteRequest(request_id=_id(data.get("request_id"), "request_id"),
                        op="starter" if starter is not None else "send", agent=_id(agent, "agent"),
                        conversation=_id(data.get("conversation"), "conversation") if starter is None else None,
                        text=text, turn=None, starter_id=_id(starter, "starter") if starter is not None else None)


def move_index(data: dict) -> int:
    """`POST /api/inbox/<item>/move` (I3: the owner reorders): the place in the queue, 0 first."""
    if type(data.get("index")) is not int:
        raise BadRequest("index must be an integer (0 = first in the queue)")
    return data["index"]


def message_text(data: dict) -> str:
    """`POST /api/inbox/<item>/message` (I7): a message that is not only white space."""
    if not isinstance(data.get("text"), str) or not data["text"].strip():
        raise BadRequest("text must be a non-empty string")
    return data["text"]


def push_endpoint(data) -> str:
    """`DELETE /api/push/subscribe` (features P): the endpoint of the subscription to remove."""
    endpoint = data.get("endpoint") if isinstance(data, dict) else None
    if not isinstance(endpoint, str):
        raise BadRequest("give the subscription's endpoint: {\"endpoint\": \"https://…\"}")
    return endpoint

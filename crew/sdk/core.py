"""The agent side of durable wire v1 as a plain state machine: no I/O, no clock of its own.

`AgentCore` holds what the agent shows (open and closed conversations, their items, asks,
actions, progress, starters) and decides every write (docs/wire-v1.md §4, §6):

- A `request_id` is applied at most once. A repeat with the same body gets the stored outcome plus
  ``"replay": true``; a repeat with another body gets ``conflict`` and does nothing. Outcomes are
  remembered for `JOURNAL_KEEP` seconds (≥ 24 h).
- An answer is applied only when its digest is that of the ask as it stands; an ask accepts one
  answer; `changed`, `invalid` and refusals do not use it up.
- `turn` grows by exactly 1 when a turn starts (send, starter, the agent's own initiative), never on
  steer; a write quoting another turn is refused `turn_moved` and does nothing.
- A send while an ask is open is refused `ask_open`; while a turn runs it is `queued` for after it.
- Only the start of a conversation is ever dropped (the history window), so `first_kept` only grows.

Every mutation bumps `rev`. Side effects the runtime must carry out (start a turn's task, stop one,
deliver an answer to a waiting `ask()`, call an action handler) come back as `Effect` values.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from typing import Any

import attrs

from collie.crew.receipts import Reason
from collie.crew.wire import (ASK_KINDS, CLOSED_PAGE, ITEMS_LIMIT_DEFAULT, ITEMS_LIMIT_MAX, PERMISSION_ROLES,
                              TEXT_MAX_DEFAULT, ask_digest)

JOURNAL_KEEP = 48 * 3600.0
HISTORY_LIMIT = 2000


class BadRequest(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


def _fingerprint(route: str, body: dict) -> str:
    canon = json.dumps({"route": route, "body": {k: v for k, v in body.items() if k != "request_id"}},
                       sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()


# --- effects: what the runtime must do after a decision -----------------------------------
@attrs.frozen
class StartTurn:
    conversation: str
    text: str | None
    request_id: str | None
    starter: str | None = None


@attrs.frozen
class StopTurn:
    conversation: str


@attrs.frozen
class Steer:
    conversation: str
    text: str


@attrs.frozen
class DeliverAnswer:
    ask_id: str
    answer: dict


@attrs.frozen
class RunAction:
    conversation: str
    action_id: str


Effect = StartTurn | StopTurn | Steer | DeliverAnswer | RunAction


@attrs.define
class Ask:
    raw: dict
    conversation: str
    turn: int
    digest: str = ""

    def __attrs_post_init__(self) -> None:
        self.digest = ask_digest(self.raw)

    @property
    def id(self) -> str:
        return self.raw["id"]


@attrs.define
class Conv:
    id: str
    title: str | None = None
    subtitle: str | None = None
    workspace: dict | None = None
    tab: dict | None = None
    harness: str | None = None
    turn: int = 0
    running: bool = False
    activity: str | None = None
    progress: dict | None = None
    actions: list[dict] = attrs.Factory(list)
    items: "OrderedDict[int, dict]" = attrs.Factory(OrderedDict)  # seq -> item
    next_seq: int = 1
    items_rev: int = 0
    first_kept: int = 1
    queued: list[tuple[str, str]] = attrs.Factory(list)  # (request_id, text) for after the turn
    closed_at: str | None = None

    def state(self, asks: dict[str, Ask]) -> str:
        if any(a.conversation == self.id for a in asks.values()):
            return "waiting"
        return "working" if self.running else "idle"


class AgentCore:
    def __init__(self, *, caps: list[str], text_max: int = TEXT_MAX_DEFAULT, history_limit: int = HISTORY_LIMIT,
                 keeps_list: bool = True, instance: str = "0") -> None:
        self.caps = list(caps)
        self.text_max = text_max
        self.history_limit = history_limit
        self.keeps_list = keeps_list
        self.instance = instance
        self.rev = 1
        self.subtitle: str | None = None
        self.conversations: dict[str, Conv] = {}
        self.closed: dict[str, Conv] = {}
        self.starters: list[dict] = []
        self.asks: dict[str, Ask] = {}  # open asks, oldest first
        self.ended_asks: dict[str, str] = {}  # ask id -> end (answered, decided, expired, stopped)
        self.journal: OrderedDict[str, tuple[str, dict, float]] = OrderedDict()
        self._ask_counter = 0
        self._conv_counter = 0

    # --- building what the agent shows ----------------------------------------------------
    def touch(self) -> None:
        self.rev += 1

    def add_conversation(self, conv_id: str, *, title=None, subtitle=None, workspace=None, tab=None,
                         harness=None, now: str | None = None) -> Conv:
        if conv_id in self.conversations:
            return self.conversations[conv_id]
        conv = Conv(id=conv_id, title=title, subtitle=subtitle, workspace=workspace, tab=tab, harness=harness,
                    activity=now)
        self.conversations[conv_id] = conv
        self.touch()
        return conv

    def new_conversation_id(self, prefix: str = "c") -> str:
        while True:
            self._conv_counter += 1
            cid = f"{prefix}-{self._conv_counter}"
            if cid not in self.conversations and cid not in self.closed:
                return cid

    def conv(self, conv_id: str) -> Conv:
        conv = self.conversations.get(conv_id) or self.closed.get(conv_id)
        if conv is None:
            raise BadRequest("not_found", f"no conversation {conv_id!r}", 404)
        return conv

    def add_item(self, conv_id: str, kind: str, now: str, **fields: Any) -> int:
        conv = self.conv(conv_id)
        seq = conv.next_seq
        conv.next_seq += 1
        self.touch()
        item = {"seq": seq, "rev": self.rev, "id": fields.pop("id", None) or f"it-{seq}", "kind": kind,
                "turn": conv.turn, "at": now, "final": fields.pop("final", True), **fields}
        conv.items[seq] = item
        conv.items_rev = self.rev
        conv.activity = now
        while len(conv.items) > self.history_limit:  # the history window: drop from the start only
            conv.items.popitem(last=False)
            conv.first_kept = next(iter(conv.items))
        return seq

    def update_item(self, conv_id: str, seq: int, now: str | None = None, **fields: Any) -> None:
        conv = self.conv(conv_id)
        item = conv.items.get(seq)
        if item is None:
            return  # already dropped from the window
        self.touch()
        item.update(fields)
        item["rev"] = self.rev
        conv.items_rev = self.rev
        if now:
            conv.activity = now

    def set_fields(self, conv_id: str, **fields: Any) -> None:
        conv = self.conv(conv_id)
        for k, v in fields.items():
            setattr(conv, k, v)
        self.touch()

    def set_starters(self, starters: list[dict]) -> None:
        self.starters = [dict(s) for s in starters]
        self.touch()

    # --- turns ------------------------------------------------------------------------------
    def start_turn(self, conv_id: str) -> int:
        conv = self.conv(conv_id)
        conv.turn += 1
        conv.running = True
        self.touch()
        return conv.turn

    def end_turn(self, conv_id: str, now: str, *, stopped: bool = False) -> StartTurn | None:
        """Close the running turn; if a send waited for it, start the next turn with it."""
        conv = self.conv(conv_id)
        if not conv.running:
            return None
        conv.running = False
        self.add_item(conv_id, "turn_end", now, stopped=stopped)
        for ask in [a for a in self.asks.values() if a.conversation == conv_id]:
            self.close_ask(ask.id, "stopped" if stopped else "decided", now)
        if conv.queued and not stopped:
            request_id, text = conv.queued.pop(0)
            self.start_turn(conv_id)
            self.add_item(conv_id, "user", now, text=text, request_id=request_id)
            return StartTurn(conv_id, text, request_id)
        if stopped:
            conv.queued.clear()
        self.touch()
        return None

    # --- asks -------------------------------------------------------------------------------
    def raise_ask(self, conv_id: str, spec: dict, now: str) -> Ask:
        conv = self.conv(conv_id)
        self._ask_counter += 1
        raw = {k: v for k, v in spec.items() if v is not None}
        raw.setdefault("id", f"a-{self.instance}-{self._ask_counter}")
        ask = Ask(raw=raw, conversation=conv_id, turn=conv.turn)
        self.asks[ask.id] = ask
        self.add_item(conv_id, "ask", now, ask_id=ask.id, tool_call_id=raw.get("tool_call_id"),
                      title=raw.get("title"), end=None)
        return ask

    def close_ask(self, ask_id: str, end: str, now: str) -> None:
        ask = self.asks.pop(ask_id, None)
        if ask is None:
            return
        self.ended_asks[ask_id] = end
        conv = self.conv(ask.conversation)
        for seq, item in reversed(conv.items.items()):
            if item["kind"] == "ask" and item.get("ask_id") == ask_id:
                self.update_item(conv.id, seq, now, end=end)
                break
        else:
            self.touch()

    # --- reading ----------------------------------------------------------------------------
    def conversation_json(self, conv: Conv) -> dict:
        return {
            "id": conv.id, "title": conv.title, "subtitle": conv.subtitle, "workspace": conv.workspace,
            "tab": conv.tab, "harness": conv.harness, "state": conv.state(self.asks), "turn": conv.turn,
            "activity": conv.activity, "progress": conv.progress,
            "asks": [a.raw for a in self.asks.values() if a.conversation == conv.id],
            "actions": conv.actions, "items_rev": conv.items_rev,
        }

    def state_json(self) -> dict:
        return {"rev": self.rev, "instance": self.instance, "subtitle": self.subtitle,
                "conversations": [self.conversation_json(c) for c in self.conversations.values()],
                "starters": self.starters}

    def items_json(self, conv_id: str, since: int, limit: int = ITEMS_LIMIT_DEFAULT) -> dict:
        conv = self.conv(conv_id)
        limit = max(1, min(limit, ITEMS_LIMIT_MAX))
        if since > conv.items_rev:
            since = 0  # the reader is ahead of us (we lost state): it re-reads from 0
        changed = sorted((i for i in conv.items.values() if i["rev"] > since), key=lambda i: i["rev"])
        page = changed[:limit]
        return {"items": page, "first_kept": conv.first_kept, "last": conv.next_seq - 1,
                "items_rev": conv.items_rev, "next_since": page[-1]["rev"] if page else conv.items_rev,
                "more": len(changed) > limit}

    def closed_json(self, cursor: str | None, limit: int = CLOSED_PAGE) -> dict:
        if "history" not in self.caps:
            raise BadRequest("unsupported", "this agent did not declare history", 404)
        if not self.keeps_list:
            raise BadRequest("no_list", "this agent keeps no list of its conversations", 404)
        rows = sorted(self.closed.values(), key=lambda c: (c.closed_at or "", c.id), reverse=True)
        try:
            start = int(cursor) if cursor else 0
        except ValueError:
            raise BadRequest("bad_request", "bad cursor") from None
        limit = max(1, min(limit, CLOSED_PAGE))
        page = rows[start:start + limit]
        nxt = str(start + limit) if start + limit < len(rows) else None
        return {"conversations": [{"id": c.id, "title": c.title, "subtitle": c.subtitle, "closed_at": c.closed_at,
                                   "activity": c.activity} for c in page], "next": nxt}

    # --- writes -----------------------------------------------------------------------------
    def write(self, route: str, target: str | None, body: dict, now: str, now_s: float,
              action: str | None = None) -> tuple[dict, list[Effect]]:
        """Apply one write at most once per request_id; return its outcome and the effects."""
        request_id = body.get("request_id")
        if not isinstance(request_id, str) or not 1 <= len(request_id) <= 128:
            raise BadRequest("bad_request", "every write carries a request_id (1-128 characters)")
        fp = _fingerprint(f"{route}:{target}:{action}", body)
        seen = self.journal.get(request_id)
        if seen is not None:
            if seen[0] != fp:
                raise BadRequest("conflict", "this request_id was used with another body; nothing was done")
            return {**seen[1], "replay": True}, []
        outcome, effects = self._apply(route, target, body, now, action)
        self.journal[request_id] = (fp, outcome, now_s)
        self._prune(now_s)
        return outcome, effects

    def _prune(self, now_s: float) -> None:
        while self.journal:
            _rid, (_fp, _out, at) = next(iter(self.journal.items()))
            if now_s - at <= JOURNAL_KEEP:
                break
            self.journal.popitem(last=False)

    # --- persistence ----------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """Everything that must survive an agent restart: conversations, turns, journal."""
        def conv_json(c: Conv) -> dict:
            d = attrs.asdict(c, recurse=False)
            d["items"] = list(c.items.values())
            d["queued"] = [list(q) for q in c.queued]
            return d

        return {"version": 1, "rev": self.rev, "subtitle": self.subtitle, "starters": self.starters,
                "open": [conv_json(c) for c in self.conversations.values()],
                "closed": [conv_json(c) for c in self.closed.values()],
                "ended_asks": self.ended_asks, "conv_counter": self._conv_counter,
                "journal": [[rid, fp, out, at] for rid, (fp, out, at) in self.journal.items()]}

    def restore(self, data: dict, now: str) -> list[Effect]:
        """Load a snapshot. Asks open at the crash are gone (the agent asks again); a turn that was
        running is ended; a send queued for after it starts now (it was acknowledged `queued`)."""
        def conv_of(d: dict) -> Conv:
            items = OrderedDict((i["seq"], i) for i in d.pop("items"))
            queued = [tuple(q) for q in d.pop("queued")]
            return Conv(**d, items=items, queued=queued)

        self.rev = int(data["rev"]) + 1
        self.subtitle = data.get("subtitle")
        self.starters = data.get("starters", [])
        self.conversations = {c.id: c for c in map(conv_of, data.get("open", []))}
        self.closed = {c.id: c for c in map(conv_of, data.get("closed", []))}
        self.ended_asks = dict(data.get("ended_asks", {}))
        self._conv_counter = int(data.get("conv_counter", 0))
        self.journal = OrderedDict((rid, (fp, out, at)) for rid, fp, out, at in data.get("journal", []))
        effects: list[Effect] = []
        for conv in list(self.conversations.values()):
            if conv.running:
                nxt = self.end_turn(conv.id, now)
                if nxt is not None:
                    effects.append(nxt)
        return effects

    def _need(self, cap: str) -> None:
        if cap not in self.caps:
            raise BadRequest("unsupported", f"this agent did not declare {cap}", 404)

    @staticmethod
    def _turn(body: dict) -> int:
        turn = body.get("turn")
        if type(turn) is not int:
            raise BadRequest("bad_request", "turn must be an integer")
        return turn

    @staticmethod
    def _text(body: dict) -> str:
        text = body.get("text")
        if not isinstance(text, str):
            raise BadRequest("bad_request", "text must be a string")
        return text

    def _apply(self, route: str, target: str | None, body: dict, now: str,
               action_id: str | None) -> tuple[dict, list[Effect]]:
        if route == "answer":
            return self._answer(target or "", body, now)
        if route == "starter":
            self._need("starters")
            starter = next((s for s in self.starters if s.get("id") == target), None)
            if starter is None:
                return {"outcome": "refused", "reason": Reason.NOT_FOUND,
                        "message": "no such starter"}, []
            cid = self.new_conversation_id("s")
            self.add_conversation(cid, title=starter.get("label"), now=now)
            turn = self.start_turn(cid)
            return {"outcome": "started", "conversation": cid, "turn": turn}, [StartTurn(cid, None, None, starter["id"])]
        conv_id = target or ""
        if route == "reopen":
            self._need("reopen")
            conv = self.closed.pop(conv_id, None)
            if conv is None:
                return {"outcome": "refused", "reason": Reason.NOT_FOUND}, []
            conv.closed_at = None
            self.conversations[conv_id] = conv
            self.touch()
            return {"outcome": "done"}, []
        if conv_id in self.closed and route in ("send", "steer", "abort", "action", "rename", "close"):
            if route == "send":
                self._need("send")
                return {"outcome": "refused", "reason": Reason.CLOSED, "message": "the conversation is closed"}, []
            raise BadRequest("not_found", f"conversation {conv_id!r} is closed", 404)
        conv = self.conversations.get(conv_id)
        if conv is None:
            raise BadRequest("not_found", f"no open conversation {conv_id!r}", 404)
        if route == "send":
            self._need("send")
            text, turn = self._text(body), self._turn(body)
            if len(text) > self.text_max:
                return {"outcome": "refused", "reason": Reason.TOO_LONG,
                        "message": f"at most {self.text_max} characters"}, []
            if turn != conv.turn:
                return {"outcome": "refused", "reason": Reason.TURN_MOVED}, []
            if any(a.conversation == conv_id for a in self.asks.values()):
                return {"outcome": "refused", "reason": Reason.ASK_OPEN, "message": "answer the open ask first"}, []
            if conv.running:
                conv.queued.append((body["request_id"], text))
                self.touch()
                return {"outcome": "queued", "turn": conv.turn}, []
            new_turn = self.start_turn(conv_id)
            self.add_item(conv_id, "user", now, text=text, request_id=body["request_id"])
            return {"outcome": "sent", "turn": new_turn}, [StartTurn(conv_id, text, body["request_id"])]
        if route == "steer":
            self._need("steer")
            text, turn = self._text(body), self._turn(body)
            if len(text) > self.text_max:
                return {"outcome": "refused", "reason": Reason.TOO_LONG}, []
            if turn != conv.turn:
                return {"outcome": "refused", "reason": Reason.TURN_MOVED}, []
            if not conv.running:
                return {"outcome": "refused", "reason": Reason.NOT_RUNNING}, []
            self.add_item(conv_id, "user", now, text=text, request_id=body["request_id"])
            return {"outcome": "sent"}, [Steer(conv_id, text)]
        if route == "abort":
            self._need("abort")
            if self._turn(body) != conv.turn:
                return {"outcome": "refused", "reason": Reason.TURN_MOVED}, []
            if not conv.running:
                return {"outcome": "refused", "reason": Reason.NOT_RUNNING}, []
            self.end_turn(conv_id, now, stopped=True)
            return {"outcome": "stopped"}, [StopTurn(conv_id)]
        if route == "action":
            self._need("actions")
            if self._turn(body) != conv.turn:
                return {"outcome": "refused", "reason": Reason.TURN_MOVED}, []
            action = next((a for a in conv.actions if a.get("id") == action_id), None)
            if action is None:
                return {"outcome": "refused", "reason": Reason.NOT_FOUND}, []
            if action.get("busy"):
                return {"outcome": "refused", "reason": Reason.BUSY}, []
            if action.get("disabled"):
                return {"outcome": "refused", "reason": Reason.DISABLED}, []
            return {"outcome": "done"}, [RunAction(conv_id, action["id"])]
        if route == "rename":
            self._need("rename")
            title = body.get("title")
            if not isinstance(title, str) or not title.strip():
                raise BadRequest("bad_request", "title must be a non-empty string")
            conv.title = title
            self.touch()
            return {"outcome": "done"}, []
        if route == "close":
            self._need("close")
            effects: list[Effect] = []
            if conv.running:
                self.end_turn(conv_id, now, stopped=True)
                effects.append(StopTurn(conv_id))
            del self.conversations[conv_id]
            conv.closed_at = now
            self.closed[conv_id] = conv
            self.touch()
            return {"outcome": "done"}, effects
        raise BadRequest("not_found", f"no route {route!r}", 404)

    def _answer(self, ask_id: str, body: dict, now: str) -> tuple[dict, list[Effect]]:
        self._need("asks")
        ask = self.asks.get(ask_id)
        if ask is None:
            end = self.ended_asks.get(ask_id)
            if end in ("decided", "expired"):
                return {"outcome": end}, []
            if end == "answered":
                return {"outcome": "answered"}, []
            return {"outcome": "not_open"}, []
        if body.get("digest") != ask.digest:
            return {"outcome": "changed"}, []
        problem = validate_answer(ask.raw, body)
        if problem:
            return {"outcome": "invalid", "message": problem}, []
        answer = {k: body[k] for k in ("option_ids", "text", "fields") if k in body}
        self.close_ask(ask_id, "answered", now)
        return {"outcome": "accepted"}, [DeliverAnswer(ask_id, answer)]


def validate_answer(ask: dict, body: dict) -> str | None:
    """The agent's own check that an answer fits its ask; None when it fits, else why not."""
    kind = ask.get("kind")
    if kind not in ASK_KINDS:
        return f"this agent cannot take answers to a {kind!r} ask here"
    if kind in ("permission", "choice"):
        ids = body.get("option_ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            return "option_ids must be a list of option ids"
        if not ids and not (kind == "choice" and ask.get("multiple")):  # a multiple choice may pick none (Q4)
            return "option_ids must name an option"
        offered = {o.get("id") for o in ask.get("options") or []}
        unknown = [i for i in ids if i not in offered]
        if unknown:
            return f"option {unknown[0]!r} was not offered"
        if len(set(ids)) != len(ids):
            return "an option is chosen twice"
        if len(ids) > 1 and not (kind == "choice" and ask.get("multiple")):
            return "pick exactly one option"
        if kind == "permission":
            role = next(o.get("role") for o in ask["options"] if o.get("id") == ids[0])
            if role not in PERMISSION_ROLES:
                return f"option {ids[0]!r} has no known role"
        return None
    if kind == "text":
        text = body.get("text")
        if not isinstance(text, str):
            return "text must be a string"
        limit = min(int(ask.get("max_length") or 500), 2000)
        if len(text) > limit:
            return f"the text is {len(text)} characters; at most {limit}"
        return None
    values = body.get("fields")
    if not isinstance(values, dict):
        return "fields must be an object of field id to value"
    spec = {f.get("id"): f for f in ask.get("fields") or []}
    for fid in values:
        if fid not in spec:
            return f"no field {fid!r} in this form"
    for fid, field in spec.items():
        value = values.get(fid)
        if value is None or value == "":
            if field.get("required"):
                return f"{field.get('label') or fid} is required"
            continue
        ftype = field.get("type")
        if ftype == "text":
            if not isinstance(value, str):
                return f"{fid} takes text"
            if len(value) > min(int(field.get("max_length") or 500), 2000):
                return f"{fid} is too long"
        elif ftype == "select":
            options = [o.get("id") if isinstance(o, dict) else o for o in field.get("options") or []]
            if value not in options:
                return f"{value!r} is not an option of {fid}"
        elif ftype == "toggle":
            if type(value) is not bool:
                return f"{fid} is a toggle: true or false"
    return None

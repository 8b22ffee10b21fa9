"""The Send protocol and its siblings, decided with no I/O (features B2–B10, O, R, C3, C4, C7, N, L3).

`plan(request, view)` judges a phone write against what the bridge last read of the agent and
returns either a refusal (nothing reaches the agent) or the exact wire call to make. `receipt(...)`
turns the agent's answer into what the phone shows. `RecentSends` keeps a pane's own lines
(C3, C4). The trio layer (`collie.bridge.writer`) adds only the lock, the journal and the socket.

Refused here, before anything reaches the agent:
- any write while the agent's hello is not read (at start, or right after the agent restarted): its
  capabilities are not known, so it is not ready — `unreachable`, never `unsupported` (W3, W4);
- any op whose capability the agent did not declare (`unsupported`);
- a send while any ask is open, even one Collie cannot read (`ask_open`, B4); a send or steer whose
  turn is not the current one (`turn_moved`); empty or over-long text; a closed conversation;
- an answer whose digest is not that of the ask as listed now (`changed`, with the current ask,
  B5); an option not offered, text over the limit, a missing required field, a wrong field type;
  an `always_allow` option without the second tap (`confirmed`, B8, Q5); a kind Collie cannot
  answer (Q7); an ask already answered through this bridge (single use);
- an action that is not listed, busy or disabled (C7); a stop or an action whose turn is not the
  current one (`turn_moved`, C7: `The conversation moved on, so the action did not run.`).
The agent checks turn, asks and digests again when the write arrives, closing every race.

`lock_key(...)` names the session a write locks (B7): an answer locks the conversation its ask
belongs to, so a card answer is refused `busy` while a send to that conversation is in flight.
`error_receipt(...)` turns an agent's error answer (wire §1) into what is true to tell the phone.
"""

from __future__ import annotations

import hashlib
import json
import math

import attrs

from collie.bridge.client import path_id
from collie.bridge.reader import ConversationView
from collie.crew.asks import AskView
from collie.crew.receipts import (MAY_BE_APPLIED, MOVED_ON, NOT_CERTAIN, NOT_CONFIRMED, REASONS, Reason, Receipt,
                                  card_for, refused)

OPS = ("send", "steer", "abort", "answer", "action", "starter", "rename", "close", "reopen")
CAP_OF = {"send": "send", "steer": "steer", "abort": "abort", "answer": "asks", "action": "actions",
          "starter": "starters", "rename": "rename", "close": "close", "reopen": "reopen"}
TITLE_MAX = 200
NOT_READY = "it is starting, and has not said what it offers yet; try again in a moment"
TEXT_MATCH_SECONDS = 30.0  # C4
LINE_KEEP_SECONDS = 600.0  # C4


@attrs.frozen
class WriteRequest:
    request_id: str
    op: str
    agent: str
    conversation: str | None = None
    text: str | None = None
    turn: int | None = None
    ask_id: str | None = None
    digest: str | None = None
    option_ids: list[str] | None = None
    answer_text: str | None = None
    fields: dict | None = None
    confirmed: bool = False
    action_id: str | None = None
    starter_id: str | None = None
    title: str | None = None
    # a send from the inbox (crew.md §3, §4): quote the conversation's turn as the owning bridge reads it
    # when the write goes out — the lead may not see the conversation at all (a cut view, issue 32)
    current_turn: bool = False

    def fingerprint(self) -> str:
        data = attrs.asdict(self)
        if not self.current_turn:  # as before the field existed: recorded requests keep their fingerprints
            del data["current_turn"]
        return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def quoting(self, conversations: dict) -> WriteRequest:
        """The request as it goes out: a send asking for the current turn quotes the turn of the view
        (the bridge reads it fresh under the session's lock just before)."""
        if self.op != "send" or not self.current_turn:
            return self
        conv = conversations.get(self.conversation or "")
        return attrs.evolve(self, turn=conv.turn if conv is not None else self.turn)



def lock_key(req: WriteRequest, conversations: dict[str, ConversationView]) -> tuple[str, str]:
    """The session a write locks (features B7, crew.md §3): its conversation. An answer names no
    conversation: it locks the one whose open ask it answers (an ask not listed, which the agent will
    only report on, locks itself alone). Starters share one lock per agent."""
    if req.op == "starter":
        return (req.agent, "\0starters")
    if req.op == "answer":
        for conv in conversations.values():
            if any(ask.id == req.ask_id for ask in conv.asks):
                return (req.agent, conv.id)
        return (req.agent, "\0ask:" + (req.ask_id or ""))
    return (req.agent, req.conversation or "")


@attrs.frozen
class AgentFacts:
    """What `plan` needs of the agent: caps, text limit, open conversations, starters, tapped asks."""

    caps: tuple[str, ...] | None  # None: the hello is not read yet (not ready), unlike () (declares nothing)
    text_max: int
    conversations: dict[str, ConversationView]
    starters: tuple[dict, ...] = ()
    answered_asks: frozenset[str] = frozenset()  # accepted through this bridge: single use


@attrs.frozen
class Call:
    """The wire write to make: route path and JSON body (always carrying the request id)."""

    path: str
    body: dict
    ask: AskView | None = None


def _q(value: str) -> str:
    return path_id(value)


def find_ask(facts: AgentFacts, ask_id: str) -> tuple[ConversationView, AskView] | None:
    for conv in facts.conversations.values():
        for ask in conv.asks:
            if ask.id == ask_id:
                return conv, ask
    return None


def plan(req: WriteRequest, facts: AgentFacts) -> Receipt | Call:
    """Refuse the write, or say exactly what to send. Pure: the same inputs give the same answer."""
    rid, op = req.request_id, req.op
    if op not in OPS:
        return refused(rid, op, Reason.UNSUPPORTED, f"unknown operation {op!r}")
    if facts.caps is None:
        return refused(rid, op, Reason.UNREACHABLE, NOT_READY)
    if CAP_OF[op] not in facts.caps:
        return refused(rid, op, Reason.UNSUPPORTED, f"this durable agent does not offer {CAP_OF[op]}")
    if op == "answer":
        return _plan_answer(req, facts)
    if op == "starter":
        if not any(s.get("id") == req.starter_id for s in facts.starters):
            return refused(rid, op, Reason.NOT_FOUND, "no such starter")
        return Call(f"/v1/starters/{_q(req.starter_id)}", {"request_id": rid})
    conv = facts.conversations.get(req.conversation or "")
    base = f"/v1/conversations/{_q(req.conversation or '')}"
    if op == "reopen":
        if conv is not None:
            return refused(rid, op, Reason.NOT_FOUND, "the conversation is already open")
        return Call(f"{base}/reopen", {"request_id": rid})
    if conv is None:
        return refused(rid, op, Reason.CLOSED if op == "send" else Reason.NOT_FOUND,
                       "the conversation is not open" if op != "send" else None)
    if op in ("send", "steer"):
        text = req.text if isinstance(req.text, str) else ""
        if not text.strip():
            return refused(rid, op, Reason.EMPTY)
        if len(text) > facts.text_max:
            return refused(rid, op, Reason.TOO_LONG, f"{len(text)} characters; at most {facts.text_max}")
        if req.turn != conv.turn:
            return refused(rid, op, Reason.TURN_MOVED)
        if op == "send" and conv.asks:
            return refused(rid, op, Reason.ASK_OPEN)
        return Call(f"{base}/{op}", {"request_id": rid, "text": text, "turn": req.turn})
    if op == "abort":
        if req.turn != conv.turn:  # the phone must quote the turn it saw (C7); nothing reaches the agent
            return refused(rid, op, Reason.TURN_MOVED, text=MOVED_ON)
        return Call(f"{base}/abort", {"request_id": rid, "turn": req.turn})
    if op == "action":
        action = next((a for a in conv.actions if a.id == req.action_id), None)
        if action is None:
            return refused(rid, op, Reason.NOT_FOUND, "that button is not offered")
        if action.busy:
            return refused(rid, op, Reason.BUSY, "the button is busy")
        if action.disabled:
            return refused(rid, op, Reason.DISABLED)
        if req.turn != conv.turn:  # the newest turn the phone saw (C7)
            return refused(rid, op, Reason.TURN_MOVED, text=MOVED_ON)
        return Call(f"{base}/actions/{_q(action.id)}", {"request_id": rid, "turn": req.turn})
    if op == "rename":
        title = (req.title or "").strip()
        if not title:
            return refused(rid, op, Reason.EMPTY, "give a title")
        if len(title) > TITLE_MAX:
            return refused(rid, op, Reason.TOO_LONG, f"at most {TITLE_MAX} characters")
        return Call(f"{base}/rename", {"request_id": rid, "title": title})
    return Call(f"{base}/close", {"request_id": rid})


def _plan_answer(req: WriteRequest, facts: AgentFacts) -> Receipt | Call:
    rid = req.request_id
    if not req.ask_id:
        return refused(rid, "answer", Reason.NOT_FOUND, "no ask named")
    body: dict = {"request_id": rid, "digest": req.digest or ""}
    if req.option_ids is not None:
        body["option_ids"] = list(req.option_ids)
    if req.answer_text is not None:
        body["text"] = req.answer_text
    if req.fields is not None:
        body["fields"] = dict(req.fields)
    path = f"/v1/asks/{_q(req.ask_id)}/answer"
    if req.ask_id in facts.answered_asks:
        return Receipt(request_id=rid, op="answer", outcome="answered", text=card_for("answered"), channel="program",
                       digest=req.digest)
    found = find_ask(facts, req.ask_id)
    if found is None:
        # Not listed: the agent says why (decided, expired, answered, not_open); it applies nothing
        # to an ask that is not open, so forwarding is safe and gives the O-table row.
        return Call(path, body)
    _conv, ask = found
    if req.digest != ask.digest:
        return Receipt(request_id=rid, op="answer", outcome="changed", text=card_for("changed"), channel="program",
                       digest=req.digest, current_ask=attrs.asdict(ask))
    problem = check_answer(ask, req)
    if problem is not None:
        reason, detail = problem
        text = f"{REASONS[reason]}: {detail}" if detail else REASONS[reason]
        return Receipt(request_id=rid, op="answer", outcome="refused", reason=reason, text=text, channel="program",
                       digest=req.digest)
    return Call(path, body, ask=ask)


def check_answer(ask: AskView, req: WriteRequest) -> tuple[Reason, str | None] | None:
    """Does the answer fit the ask as the phone showed it? (reason, detail) when not."""
    if not ask.answerable:
        return Reason.READ_ONLY, None
    if ask.kind in ("permission", "choice"):
        ids = req.option_ids or []
        if not ids and not (ask.kind == "choice" and ask.multiple):  # `Pick any number` includes none (Q4)
            return Reason.INVALID, "pick an option"
        offered = {o.id: o for o in ask.options}
        for oid in ids:
            if oid not in offered:
                return Reason.NOT_OFFERED, f"option {oid!r}"
        if len(ids) != len(set(ids)) or (len(ids) > 1 and not ask.multiple):
            return Reason.INVALID, "pick one option"
        if any(offered[o].role == "always_allow" for o in ids):
            if not ask.always_allow:
                return Reason.NOT_OFFERED, "Always allow is not offered on this card"
            if not req.confirmed:
                return Reason.CONFIRM, f"tap again to always allow {ask.tool}"
        return None
    if ask.kind == "text":
        text = req.answer_text
        if not isinstance(text, str):
            return Reason.INVALID, "type an answer"
        if len(text) > (ask.max_length or 500):
            return Reason.TOO_LONG, f"{len(text)} of {ask.max_length}"
        return None
    values = req.fields
    if not isinstance(values, dict):
        return Reason.INVALID, "fill in the form"
    spec = {f.id: f for f in ask.fields}
    for fid in values:
        if fid not in spec:
            return Reason.INVALID, f"no field {fid!r}"
    for f in ask.fields:
        value = values.get(f.id)
        if value is None or value == "":
            if f.required:
                return Reason.INVALID, f"{f.label} is required"
            continue
        if f.type == "text" and (not isinstance(value, str) or len(value) > (f.max_length or 500)):
            return Reason.INVALID, f"{f.label} takes text of at most {f.max_length} characters"
        if f.type == "select" and value not in {o.id for o in f.options}:
            return Reason.NOT_OFFERED, f"{value!r} for {f.label}"
        if f.type == "toggle" and type(value) is not bool:
            return Reason.INVALID, f"{f.label} is on or off"
    return None


# Wire §4 and §6: the outcomes each route can answer (`refused` carries a reason of the agent's)
OUTCOMES = {
    "send": {"sent", "queued", "refused"}, "steer": {"sent", "refused"}, "abort": {"stopped", "refused"},
    "action": {"done", "refused"}, "starter": {"started"}, "rename": {"done"}, "close": {"done"},
    "reopen": {"done", "refused"},
    "answer": {"accepted", "decided", "expired", "answered", "changed", "not_open", "invalid"},
}


def _wire_id(value: object) -> bool:
    return isinstance(value, str) and 1 <= len(value) <= 128 and "/" not in value and \
        all(" " <= ch <= "~" for ch in value)


def fits(op: str, answer: dict) -> bool:
    """Whether a write's 200 answer is one its route has (wire §4/§6), with the fields it must carry."""
    outcome = answer.get("outcome")
    if outcome not in OUTCOMES.get(op, ()):
        return False
    if outcome in ("sent", "queued") and op == "send" or outcome == "started":
        if type(answer.get("turn")) is not int:
            return False
    return outcome != "started" or _wire_id(answer.get("conversation"))


def receipt(req: WriteRequest, answer: dict, *, retry: bool = False) -> Receipt:
    """The agent's answer to a write, as the phone shows it. An answer its route does not have is the
    final `unknown` (`protocol`): what the agent did is not known, and a resend gets it back again."""
    if not fits(req.op, answer):
        return Receipt(request_id=req.request_id, op=req.op, outcome="unknown", reason="protocol",
                       text=MAY_BE_APPLIED, channel="program" if req.op == "answer" else None,
                       digest=req.digest if req.op == "answer" else None)
    outcome = answer["outcome"]
    message = answer.get("message") if isinstance(answer.get("message"), str) else None
    replay = answer.get("replay") is True
    if req.op == "answer":
        reason_text = message if outcome == "invalid" else None
        return Receipt(request_id=req.request_id, op="answer", outcome=outcome, message=message, channel="program",
                       digest=req.digest, text=card_for(outcome, retry=retry, reason_text=reason_text),
                       reason=Reason.INVALID if outcome == "invalid" else None, replay=replay)
    turn = answer.get("turn") if type(answer.get("turn")) is int else None
    conversation = answer.get("conversation") if isinstance(answer.get("conversation"), str) else None
    if outcome == "refused":
        reason = answer.get("reason") if isinstance(answer.get("reason"), str) else "refused"
        moved = req.op in ("action", "abort") and reason == Reason.TURN_MOVED
        text = MOVED_ON if moved else REASONS.get(reason, message or reason)
        return Receipt(request_id=req.request_id, op=req.op, outcome="refused", reason=reason, text=text,
                       message=message, replay=replay)
    return Receipt(request_id=req.request_id, op=req.op, outcome=outcome, message=message, turn=turn,
                   conversation=conversation, replay=replay)


def error_receipt(req: WriteRequest, code: str, detail: str | None, *, retry: bool = False) -> Receipt:
    """The agent answered a write with a wire error code (wire §1) instead of an outcome: what is
    true to tell the phone.

    - `internal`: the agent failed while handling it, so whether it applied it is not known:
      `unknown` (the journal keeps it open; Retry and recovery resend the same id, safely).
    - `conflict`: the agent already holds this request id with another body. This body did
      nothing, but an earlier request under the same id — in practice an earlier form of this very
      tap — may have been applied: `unknown` with `May already be applied. Check the chat.`, final
      (resending the same id can only conflict again).
    - any other code on a first attempt: the agent did nothing, a true refusal with its own reason
      (`not_found` on an answer is the O row `not_open`: no such open ask, no reason given).
    - on a retry (a first attempt went out before, and may have been applied): an answer keeps its
      O-table retry rows (`not_open` → `May already be applied. Check the chat.`); `unauthorized` and
      `version` stop at the agent's door, so it stays `unknown` to be resent; anything else is the
      final `unknown` with `May already be applied. Check the chat.`.
    """
    rid, op = req.request_id, req.op
    answer = op == "answer"
    common = {"request_id": rid, "op": op, "channel": "program" if answer else None,
              "digest": req.digest if answer else None}
    message = detail if detail and detail != code else None
    if code == "internal" or (retry and code in ("unauthorized", "version")):
        return Receipt(outcome="unknown", reason=code, text=NOT_CERTAIN if answer else NOT_CONFIRMED,
                       message=message, **common)
    if answer and code == "not_found":
        return Receipt(outcome="not_open", text=card_for("not_open", retry=retry), message=message, **common)
    if code == "conflict" or retry:
        return Receipt(outcome="unknown", reason=code, text=MAY_BE_APPLIED, message=message, **common)
    return refused(rid, op, code, message, channel=common["channel"], digest=common["digest"])


# --- C3, C4: the pane's own lines ------------------------------------------------------------
@attrs.define
class SendLine:
    request_id: str
    text: str
    outcome: str  # sent | queued | unknown | refused
    sent_at: float
    clock_from: float | None  # when the 10-minute clock started (a queued send: when its turn ended)
    effective: bool = False


class RecentSends:
    """One conversation's recent sends: each line until the agent's own copy takes its place.

    A line becomes effective when a `user` item names its request id, or, for an agent that does
    not echo ids, when a `user` item with identical text is first seen after the send went out (`add`
    is given that time: the copy may be read before the receipt is recorded) and within 30 s of its
    clock's start (a queued send: its turn's end). A line never echoed stops showing 10 minutes after its
    clock started.
    """

    def __init__(self) -> None:
        self.lines: dict[str, SendLine] = {}
        self._matched_seqs: set[int] = set()

    def add(self, request_id: str, text: str, outcome: str, now: float) -> None:
        if request_id in self.lines:
            self.lines[request_id].outcome = outcome
            return
        self.lines[request_id] = SendLine(request_id, text, outcome, now, None if outcome == "queued" else now)

    def turn_ended(self, now: float) -> None:
        for line in self.lines.values():
            if line.outcome == "queued" and line.clock_from is None:
                line.clock_from = now

    def observe(self, items: list[dict], seen_at: dict[int, float]) -> None:
        for item in items:
            if item.get("kind") != "user":
                continue
            rid = item.get("request_id")
            if rid in self.lines:
                self.lines[rid].effective = True
                continue
            seq = item.get("seq")
            if rid is not None or seq in self._matched_seqs:
                continue
            first = seen_at.get(seq)
            for line in sorted(self.lines.values(), key=lambda s: s.sent_at):
                # from the moment the send went out (its copy may be read before its receipt is in) to
                # 30 s after its clock started (a queued send: its turn's end, maybe not seen yet)
                until = (line.clock_from if line.clock_from is not None else math.inf) + TEXT_MATCH_SECONDS
                if (not line.effective and line.text == item.get("text") and first is not None
                        and line.sent_at - 1e-9 <= first <= until):
                    line.effective = True
                    self._matched_seqs.add(seq)
                    break

    def visible(self, now: float) -> list[dict]:
        out = []
        for line in self.lines.values():
            if line.effective:
                continue
            if line.clock_from is not None and now - line.clock_from >= LINE_KEEP_SECONDS:
                continue
            shown = {"sent": "clock", "queued": "queued", "unknown": "not_confirmed", "refused": "not_sent"}[line.outcome]
            out.append({"request_id": line.request_id, "text": line.text, "state": shown})
        return out

    def prune(self, now: float) -> None:
        for rid in [r for r, line in self.lines.items()
                    if line.effective or (line.clock_from is not None and now - line.clock_from >= LINE_KEEP_SECONDS)]:
            del self.lines[rid]

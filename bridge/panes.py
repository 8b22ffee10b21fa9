"""What the phone reads, built from what the bridge read (features B1, C6, C7, D1–D3, L1–L2, Q2, Q8, R3).

Pure functions of the reader's view: no I/O, no clock. The shapes are documented in
docs/phone-api.md.
"""

from __future__ import annotations

import attrs

from collie.bridge.reader import AgentReader, ConversationView
from collie.crew.markdown import render as render_markdown
from collie.crew.receipts import LINE_DECIDED, LINE_TIMED_OUT
from collie.crew.views import READY, STATUS_LABEL

UNTITLED = "Untitled conversation"
EXPERIMENTAL = "Experimental"
ASK_CARDS = 5  # Q8: the first five asks draw as cards, then "Show N more"
ASKS_MORE = 95  # Q8: the rest the "Show N more" row opens, bounded (100 cards in all)


def header_line2(conv: ConversationView, agent_subtitle: str | None) -> str | None:
    """C6: steps, else percent, else the subtitle, else the workspace. Progress only while it works or waits."""
    progress = conv.progress or {}
    if conv.state in ("working", "waiting"):
        steps = progress.get("steps")
        if isinstance(steps, list) and steps:
            current = progress.get("current") if isinstance(progress.get("current"), int) else 0
            if 0 <= current < len(steps):
                return f"Step {current + 1} of {len(steps)}: {steps[current]}"
        elif isinstance(progress.get("percent"), (int, float)):
            label = progress.get("label")
            percent = f"{round(progress['percent'])}%"
            return f"{percent}: {label}" if label else percent
    return conv.subtitle or agent_subtitle or conv.workspace


def ask_json(ask) -> dict:
    d = attrs.asdict(ask)
    d["text_shortened"] = ask.shortened  # Q6: the card says `Text shortened`
    return d


OFFLINE_CONTROLS = ("send",)  # with its machine offline a send still queues in the inbox (I1); the rest fail fast


def pane_state(reader: AgentReader, conv_id: str, *, recent_sends: list[dict] | None = None,
               machine: str = "local", online: bool = True) -> dict | None:
    """B1: one open conversation as the phone draws it; None when it is not open. `online` is False for
    a member machine that is offline: only the controls that can queue stay on."""
    conv = reader.conversations.get(conv_id)
    if conv is None:
        return None
    caps = list(reader.hello.caps) if reader.hello else []
    asks = [ask_json(a) for a in conv.asks]
    return {
        "machine": machine, "agent": reader.name, "conversation": conv.id,
        "title": conv.title or UNTITLED, "badge": EXPERIMENTAL,
        "line2": header_line2(conv, reader.subtitle),
        "state": conv.state, "turn": conv.turn, "activity": conv.activity, "input": "",
        "needs_answer": f"Needs your answer · {reader.name}" if asks else None,
        "ask": asks[0] if asks else None,  # the oldest open ask
        "asks": asks[:ASK_CARDS], "more_asks": max(0, len(asks) - ASK_CARDS),
        "asks_more": asks[ASK_CARDS:ASK_CARDS + ASKS_MORE],
        "actions": [attrs.asdict(a) for a in conv.actions],
        "controls": {k: v and (online or k in OFFLINE_CONTROLS) for k, v in (
            ("steer", "steer" in caps), ("stop", "abort" in caps), ("send", "send" in caps),
            ("rename", "rename" in caps), ("close", "close" in caps), ("actions", "actions" in caps))},
        "can_reopen": "reopen" in caps and "history" in caps,  # L3: a closed conversation offers Reopen
        "online": online,
        "progress": conv.progress, "caps": caps, "recent_sends": recent_sends or [],
        "agent_status": reader.status,
    }


def masked_pane(state: dict | None, on: bool) -> dict | None:
    """X1: the pane's title and line 2 and its asks' titles and bodies with secrets masked, like the
    conversation list's, so a secret never sits on the phone's screen (the ask's digest is left alone: the
    answer still quotes the ask as the agent listed it)."""
    if state is None or not on:
        return state
    from collie.crew.redact import redact

    def text(v):
        return redact(v) if isinstance(v, str) else v

    def ask(a):
        return {**a, **{k: text(a[k]) for k in ("title", "body") if k in a}} if isinstance(a, dict) else a
    out = dict(state)  # only the keys the pane has: nothing added
    for k in ("title", "line2"):
        if k in out:
            out[k] = text(out[k])
    if "ask" in out:
        out["ask"] = ask(out["ask"])
    for k in ("asks", "asks_more"):
        if isinstance(out.get(k), list):
            out[k] = [ask(a) for a in out[k]]
    return out


def chat_items(items: list[dict], tapped: set[str]) -> list[dict]:
    """Chat items; an ask that expired or was decided with no tap from the phone gets its R3 line."""
    out = []
    for item in items:
        if item.get("kind") == "ask" and item.get("end") in ("decided", "expired") and item.get("ask_id") not in tapped:
            lead = LINE_DECIDED if item["end"] == "decided" else LINE_TIMED_OUT
            item = {**item, "line": f"{lead} {item.get('title') or ''}".rstrip()}
        if item.get("kind") == "markdown":
            item = {**item, "html": render_markdown(item.get("text") or "")}  # C1: rendered here, never in the page
        out.append(item)
    return out


def conversation_rows(reader: AgentReader) -> list[dict]:
    """L1, L2: waiting first, then the other open conversations newest first."""
    rows = []
    for conv in reader.conversations.values():
        waiting = bool(conv.asks)
        rows.append({
            "id": conv.id, "title": conv.title or UNTITLED, "state": conv.state, "activity": conv.activity,
            "line": conv.asks[0].title if waiting else (conv.subtitle or reader.subtitle),
            "waiting_asks": len(conv.asks), "waiting": waiting,
        })
    rows.sort(key=lambda r: r["activity"] or "", reverse=True)
    rows.sort(key=lambda r: not r["waiting"])
    return rows


def agent_row(reader: AgentReader, member: str | None = None) -> dict:
    """D1: one row of the Durable agents section."""
    st = reader.status_view()
    line2 = f"{st.runtime or 'durable'}, {'local' if st.local else 'remote'}" + (f", {member}" if member else "")
    ready = st.status == READY
    return {
        "name": st.name, "badge": EXPERIMENTAL, "line2": line2, "status": st.status,
        "runtime": st.runtime or "durable", "where": "local" if st.local else "remote", "member": member,
        "status_label": None if ready else STATUS_LABEL[st.status], "reason": st.reason, "detail": st.detail,
        "open": st.open_count if ready else None, "waiting": (st.waiting_count or None) if ready else None,
    }

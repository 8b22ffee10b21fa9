"""What Collie shows of an agent's asks, actions and items: parsed, trimmed, and marked.

An agent may send anything. Collie never shows more than the product's limits (features Q4, C7, P2)
and always says when it cut something (`shortened`, Q6) — a shortened ask never offers Always allow,
because the full text was not shown. A kind Collie does not know is shown read-only (Q7). Asks that
take more than one tap are `modal: unreadable` in pane state (B8, Q9).

The digest is computed on the raw object before any of this (docs/wire-v1.md §4).
"""

from __future__ import annotations

from typing import Any

import attrs

from collie.crew.wire import ASK_KINDS, PERMISSION_ROLES, ask_digest, utc_time

TITLE_MAX = 200
BODY_MAX = 4000
LABEL_MAX = 80
PLACEHOLDER_MAX = 120
LIMITS = {"permission": 6, "choice": 8, "form": 6}
TEXT_DEFAULT = 500
TEXT_CAP = 2000
ACTIONS_MAX = 4
ACTION_LABEL_MAX = 16
ACTION_ICONS = ("play", "pause", "check", "x", "refresh", "archive", "flag", "star", "send", "note", "search", "more")
PUSH_KEEP_MAX = 1024  # what is kept of the agent's push texts: cut here, a secret would be half masked
ITEM_TEXT_MAX = 256 * 1024
UNANSWERABLE = "This ask cannot be answered from the phone."


@attrs.frozen
class Option:
    id: str
    label: str
    role: str | None = None


@attrs.frozen
class Field:
    id: str
    label: str
    type: str
    required: bool = False
    max_length: int | None = None
    options: list[Option] = attrs.Factory(list)
    default: Any = None


@attrs.frozen
class AskView:
    id: str
    digest: str
    kind: str
    title: str
    body: str | None = None
    tool: str | None = None
    tool_call_id: str | None = None
    item_id: str | None = None
    options: list[Option] = attrs.Factory(list)
    multiple: bool = False
    max_length: int | None = None
    placeholder: str | None = None
    fields: list[Field] = attrs.Factory(list)
    expires_at: str | None = None
    push_title: str | None = None
    push_line: str | None = None
    answerable: bool = True  # False: a kind this Collie does not know (Q7)
    shortened: bool = False  # Collie cut or cleaned something (Q4, Q6)
    always_allow: bool = False  # the card may offer Always allow (Q5, Q6, T6)
    modal: str | None = None  # "unreadable" where one tap cannot answer it (B8)


class _Cut:
    def __init__(self) -> None:
        self.any = False

    def text(self, value: Any, limit: int) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str):
            self.any = True
            value = str(value)
        clean = "".join(ch if ch.isprintable() or ch in "\n\t" else " " for ch in value)
        if clean != value:
            self.any = True
        if len(clean) > limit:
            self.any = True
            clean = clean[: limit - 1] + "…"
        return clean

    def many(self, values: Any, limit: int) -> list:
        if not isinstance(values, list):
            if values is not None:
                self.any = True
            return []
        if len(values) > limit:
            self.any = True
        return values[:limit]


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def sanitize_ask(raw: dict, *, remote: bool = False) -> AskView | None:
    """Parse one listed ask; None when it has no usable id (it cannot be answered or even named)."""
    ask_id = raw.get("id")
    if not isinstance(ask_id, str) or not ask_id:
        return None
    cut = _Cut()
    kind = raw.get("kind") if isinstance(raw.get("kind"), str) else "unknown"
    title = cut.text(raw.get("title") if raw.get("title") is not None else "", TITLE_MAX) or ""
    known = kind in ASK_KINDS
    options: list[Option] = []
    fields: list[Field] = []
    max_length = None
    if kind in ("permission", "choice"):
        for opt in cut.many(raw.get("options"), LIMITS[kind]):
            if not isinstance(opt, dict) or not isinstance(opt.get("id"), str):
                cut.any = True
                continue
            role = _str(opt.get("role"))
            if kind == "permission" and role not in PERMISSION_ROLES:
                cut.any = True
                continue
            options.append(Option(opt["id"], cut.text(opt.get("label") or opt["id"], LABEL_MAX), role))
    elif kind == "text":
        asked = raw.get("max_length")
        max_length = min(asked, TEXT_CAP) if type(asked) is int and asked > 0 else TEXT_DEFAULT
        cut.any |= type(asked) is int and asked > TEXT_CAP  # a longer answer than asked for is cut: say so (Q4)
    elif kind == "form":
        for f in cut.many(raw.get("fields"), LIMITS["form"]):
            if not isinstance(f, dict) or not isinstance(f.get("id"), str) or f.get("type") not in ("text", "select", "toggle"):
                cut.any = True
                continue
            fopts = [Option(o if isinstance(o, str) else str(o.get("id")),
                            cut.text(o if isinstance(o, str) else o.get("label") or o.get("id"), LABEL_MAX))
                     for o in cut.many(f.get("options"), LIMITS["choice"]) if isinstance(o, (str, dict))]
            flen = f.get("max_length")
            cut.any |= f["type"] == "text" and type(flen) is int and flen > TEXT_CAP
            fields.append(Field(id=f["id"], label=cut.text(f.get("label") or f["id"], LABEL_MAX), type=f["type"],
                                required=f.get("required") is True,
                                max_length=(min(flen, TEXT_CAP) if type(flen) is int and flen > 0 else TEXT_DEFAULT)
                                if f["type"] == "text" else None,
                                options=fopts, default=f.get("default") if f["type"] == "toggle" else None))
    push = raw.get("push") if isinstance(raw.get("push"), dict) else {}
    multiple = kind == "choice" and raw.get("multiple") is True
    tool = _str(raw.get("tool"))
    has_always = any(o.role == "always_allow" for o in options)
    shortened = cut.any
    view = AskView(
        id=ask_id, digest=ask_digest(raw), kind=kind, title=title,
        body=cut.text(raw.get("body"), BODY_MAX), tool=tool, tool_call_id=_str(raw.get("tool_call_id")),
        item_id=_str(raw.get("item_id")), options=options, multiple=multiple, max_length=max_length,
        placeholder=cut.text(raw.get("placeholder"), PLACEHOLDER_MAX), fields=fields,
        expires_at=utc_time(raw.get("expires_at")),
        push_title=_trim(push.get("title"), PUSH_KEEP_MAX), push_line=_trim(push.get("line"), PUSH_KEEP_MAX),
        answerable=known, shortened=shortened or cut.any,
        always_allow=has_always and bool(tool) and not (shortened or cut.any) and not remote,
    )
    multi_tap = kind in ("text", "form") or multiple or has_always or not known
    return attrs.evolve(view, modal="unreadable" if multi_tap else None)


def _trim(value: Any, limit: int) -> str | None:
    if not isinstance(value, str):
        return None
    return value if len(value) <= limit else value[: limit - 1] + "…"


@attrs.frozen
class ActionView:
    id: str
    label: str
    icon: str | None
    busy: bool
    disabled: bool


def sanitize_actions(raw: Any) -> tuple[list[ActionView], bool]:
    """C7: at most 4 buttons, labels of at most 16 characters, one of 12 icons (else none)."""
    cut = _Cut()
    out = []
    for a in cut.many(raw, ACTIONS_MAX):
        if not isinstance(a, dict) or not isinstance(a.get("id"), str):
            cut.any = True
            continue
        icon = a.get("icon") if a.get("icon") in ACTION_ICONS else None
        out.append(ActionView(a["id"], cut.text(a.get("label") or a["id"], ACTION_LABEL_MAX) or a["id"], icon,
                              a.get("busy") is True, a.get("disabled") is True))
    return out, cut.any


def sanitize_item(item: dict) -> dict:
    """C1: cap texts; a link that is not https:// keeps its label but loses the address (`cut`)."""
    out = dict(item)
    if "at" in out:
        out["at"] = utc_time(out["at"])  # wire §1: one form for the phone's Date (C4 matches by it)
    for key in ("text", "output"):
        value = out.get(key)
        if isinstance(value, str) and len(value) > ITEM_TEXT_MAX:
            out[key] = value[:ITEM_TEXT_MAX]
            out["cut"] = True
    if out.get("kind") == "link":
        url = out.get("url")
        if not (isinstance(url, str) and url.lower().startswith("https://")):
            out["url"] = None
            out["cut"] = True
    return out

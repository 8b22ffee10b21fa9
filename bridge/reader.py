"""What the bridge knows of one agent, as a plain class fed what the agent answered (no I/O).

Events in: `on_hello`, `on_state`, `on_not_modified`, `on_items`, `on_failure`. Out: the agent's
status and view, which conversations need their items read, and at most one log line per change.

Rules it keeps (docs/wire-v1.md, features W1–W6, S3):
- Status is `starting` until the first hello and state; `ready` after; `unreachable(reason)` on any
  failure (the last good view is kept); `version_mismatch` when the wire ranges do not overlap, after
  which nothing but `/hello` is read.
- A new `instance` (the agent restarted) means: hello again, and re-read every conversation's items
  from 0 (its `rev` counters may have started over).
- Items merge by `seq`. When `first_kept` is beyond the next `seq` we expected, the agent dropped
  items before we read them: a gap is recorded there and Chat shows the left-out line.
- A state or items answer that does not fit the contract is rejected whole; the last good view stays,
  and the problem is logged once (`protocol`).
"""

from __future__ import annotations

import attrs

from crew.asks import AskView, sanitize_actions, sanitize_ask, sanitize_item
from crew.views import READY, STARTING, UNREACHABLE, VERSION_MISMATCH, AgentStatus
from crew.wire import OURS, HelloAnswer, ItemsPage, State, WireError, WireRange, structure, unstructure

LEFT_OUT = "Older messages were left out: the durable agent no longer keeps them."


def log_mismatch(theirs: WireRange) -> str:
    return (f"[durable] The durable agent speaks wire {theirs.short()}, this Collie speaks {OURS.short()}. "
            "Update Collie, or the agent's SDK.")


def phone_mismatch(theirs: WireRange) -> str:
    return (f"Program speaks wire {theirs.short()}, this Collie speaks {OURS.short()}. "
            "Update Collie, or the durable agent's SDK.")


@attrs.frozen
class ConversationView:
    id: str
    title: str | None
    subtitle: str | None
    workspace: str | None
    tab: str | None
    harness: str | None
    state: str
    turn: int
    activity: str | None
    progress: dict | None
    asks: list[AskView]
    actions: list
    actions_cut: bool
    items_rev: int


@attrs.define
class ItemLog:
    """The items Collie holds of one conversation, by seq, and where it knows it missed some."""

    items: dict[int, dict] = attrs.Factory(dict)
    since: int = 0
    gaps: set[int] = attrs.Factory(set)  # a seq before which items were left out
    dirty: dict[int, dict] = attrs.Factory(dict)  # changed since the cache last saved
    seen: dict[int, float] = attrs.Factory(dict)  # seq -> when the bridge first read it (C4)

    def next_seq(self) -> int:
        return max(self.items) + 1 if self.items else 1


class AgentReader:
    def __init__(self, name: str, *, transport: str, address: str, local: bool, token_set: bool = False,
                 origin: str = "sources.json") -> None:
        self.name = name
        self.transport, self.address, self.local = transport, address, local
        self.token_set, self.origin = token_set, origin
        self.status = STARTING
        self.reason: str | None = None
        self.detail: str | None = None
        self.hello: HelloAnswer | None = None
        self.theirs: WireRange | None = None
        self.logged_ranges: set[WireRange] = set()
        self.instance: str | None = None
        self.etag: str | None = None
        self.rev = 0
        self.subtitle: str | None = None
        self.conversations: dict[str, ConversationView] = {}
        self.starters: list[dict] = []
        self.logs: dict[str, ItemLog] = {}
        self.last_ok: float | None = None
        self.cut_logged: set[str] = set()
        self.raw_hello: object | None = None
        self.raw_state: object | None = None
        self.remote = not local
        self._saved: set[str] = set()

    # --- events -----------------------------------------------------------------------------
    def on_hello(self, data: object, now: float) -> list[str]:
        try:
            hello = structure(data, HelloAnswer)
        except WireError as exc:
            return self.on_failure("protocol", f"the agent's hello does not fit wire v1: {exc}")
        lines = []
        if self.instance is not None and hello.instance != self.instance:
            lines.append(f"[durable] {self.name}: the agent restarted (instance {hello.instance})")
            self._forget_positions()
        self.hello, self.theirs, self.instance = hello, hello.wire, hello.instance
        self.raw_hello = data
        self.subtitle = hello.subtitle
        if OURS.highest_common(hello.wire) is None:
            if hello.wire not in self.logged_ranges:
                self.logged_ranges.add(hello.wire)
                lines.append(log_mismatch(hello.wire))
            self.status, self.reason, self.detail = VERSION_MISMATCH, "version", phone_mismatch(hello.wire)
            self.etag = None
            return lines
        if self.status == VERSION_MISMATCH:
            lines.append(f"[durable] {self.name}: the agent now speaks wire {hello.wire.short()}; reading it again")
            self.status = STARTING
        self.last_ok = now
        return lines

    def needs_hello(self) -> bool:
        return self.hello is None or self.status == VERSION_MISMATCH

    def on_state(self, data: object, etag: str | None, now: float) -> tuple[list[str], list[str]]:
        """Returns (log lines, ids of conversations whose items must be read)."""
        try:
            state = structure(data, State)
        except WireError as exc:
            return self.on_failure("protocol", f"the agent's state does not fit wire v1: {exc}"), []
        lines = []
        if self.instance is not None and state.instance != self.instance:
            self.hello = None  # hello again before trusting anything else (W3)
            lines.append(f"[durable] {self.name}: the agent restarted (instance {state.instance}); saying hello again")
            self.instance = state.instance
            self._forget_positions()
            self.etag = None
            return lines, []
        views, more_lines = self._views(state)
        lines += more_lines
        self.conversations = views
        self.raw_state = data
        for gone in set(self.logs) - set(views):  # closed conversations are read from the agent, not kept
            del self.logs[gone]
        self.starters = [unstructure(s) for s in state.starters]
        self.subtitle = state.subtitle if state.subtitle is not None else self.subtitle
        self.rev, self.etag = state.rev, etag
        lines += self._ok(now)
        stale = [cid for cid, v in views.items() if self.logs.get(cid, ItemLog()).since != v.items_rev]
        return lines, stale

    def _views(self, state: State) -> tuple[dict[str, ConversationView], list[str]]:
        lines: list[str] = []
        remote = self.remote
        views = {}
        for conv in state.conversations:
            asks = []
            for raw in conv.asks:
                view = sanitize_ask(raw, remote=remote) if isinstance(raw, dict) else None
                if view is None:
                    lines += self._cut_once(f"{conv.id}:badask", f"[durable] {self.name}: conversation {conv.id}: "
                                                                  "an ask without an id was ignored")
                    continue
                if view.shortened:
                    lines += self._cut_once(f"ask:{view.id}", f"[durable] {self.name}: ask {view.id}: over the "
                                                              "limits; shown shortened (Text shortened)")
                if not view.answerable:
                    lines += self._cut_once(f"kind:{view.id}", f"[durable] {self.name}: ask {view.id}: kind "
                                                               f"{view.kind!r} is unknown; shown read-only")
                asks.append(view)
            actions, actions_cut = sanitize_actions(conv.actions)
            if actions_cut:
                lines += self._cut_once(f"actions:{conv.id}", f"[durable] {self.name}: conversation {conv.id}: "
                                                              "actions over the limits were cut")
            views[conv.id] = ConversationView(
                id=conv.id, title=conv.title, subtitle=conv.subtitle,
                workspace=(conv.workspace.title or conv.workspace.id) if conv.workspace else None,
                tab=(conv.tab.title or conv.tab.id) if conv.tab else None, harness=conv.harness,
                state=conv.state if conv.state in ("idle", "working", "waiting") else "idle", turn=conv.turn,
                activity=conv.activity, progress=unstructure(conv.progress) if conv.progress else None,
                asks=asks, actions=actions, actions_cut=actions_cut, items_rev=conv.items_rev)
        return views, lines

    def on_not_modified(self, now: float) -> list[str]:
        return self._ok(now)

    def on_items(self, conv_id: str, data: object, now: float = 0.0) -> tuple[list[str], bool]:
        """Merge one page; returns (log lines, whether another page follows)."""
        try:
            page = structure(data, ItemsPage)
        except WireError as exc:
            return self._cut_once(f"items:{conv_id}", f"[durable] {self.name}: conversation {conv_id}: items do "
                                                      f"not fit wire v1 ({exc}); keeping what was read"), False
        log = self.logs.setdefault(conv_id, ItemLog())
        if page.first_kept > log.next_seq() and page.first_kept not in log.gaps:
            log.gaps.add(page.first_kept)  # S3: dropped before we read them
        for item in page.items:
            raw = unstructure(item)
            clean = sanitize_item({k: v for k, v in raw.items() if v is not None})
            log.items[item.seq] = log.dirty[item.seq] = clean
            log.seen.setdefault(item.seq, now)
        log.since = page.next_since
        return [], page.more

    def on_failure(self, reason: str, detail: str) -> list[str]:
        changed = (self.status, self.reason, self.detail) != (UNREACHABLE, reason, detail)
        if self.status != VERSION_MISMATCH or reason != "version":
            self.status, self.reason, self.detail = UNREACHABLE, reason, detail
        if reason in ("connection-refused", "no-socket", "timeout", "closed"):
            self.hello = None  # the agent may come back as another instance
        return [f"[durable] {self.name}: unreachable: {reason}: {detail}"] if changed else []

    def stale_conversations(self) -> list[str]:
        """Open conversations whose items changed since the bridge last read them."""
        return [cid for cid, v in self.conversations.items() if self.items_since(cid) != v.items_rev]

    def items_since(self, conv_id: str) -> int:
        log = self.logs.get(conv_id)
        return log.since if log else 0

    def take_dirty(self) -> dict:
        out = {}
        for cid, log in self.logs.items():
            if log.dirty or cid not in self._saved:
                out[cid] = (log.since, set(log.gaps), log.dirty)
                log.dirty = {}
                self._saved.add(cid)
        return out

    def restore(self, cached: dict) -> None:
        """Fill the view from the cache at start: panes open at once; status stays `starting`."""
        try:
            hello = structure(cached["hello"], HelloAnswer) if cached.get("hello") else None
            state = structure(cached["state"], State) if cached.get("state") else None
        except WireError:
            return
        if hello is None or state is None or OURS.highest_common(hello.wire) is None:
            return
        self.instance, self.subtitle, self.raw_hello, self.raw_state = state.instance, state.subtitle, cached["hello"], cached["state"]
        self.conversations, _ = self._views(state)
        self.starters = [unstructure(s) for s in state.starters]
        self.rev = state.rev
        self.etag = cached.get("etag")
        for cid, (since, gaps) in cached.get("logs", {}).items():
            if cid in self.conversations:
                self.logs[cid] = ItemLog(items=cached["items"].get(cid, {}), since=since, gaps=set(gaps))
                self._saved.add(cid)

    # --- reading back -------------------------------------------------------------------------
    def items(self, conv_id: str, since_seq: int = 0) -> list[dict]:
        """Items of an open conversation in seq order, with a `gap` marker item where some were left out."""
        log = self.logs.get(conv_id)
        if log is None:
            return []
        out = []
        for seq in sorted(log.items):
            if seq in log.gaps and seq > since_seq:
                out.append({"kind": "gap", "seq": seq, "text": LEFT_OUT})
            if seq > since_seq:
                out.append(log.items[seq])
        return out

    def status_view(self) -> AgentStatus:
        waiting = sum(1 for c in self.conversations.values() if c.asks)
        hello = self.hello
        return AgentStatus(
            name=self.name, transport=self.transport, address=self.address, local=self.local,
            status=self.status, reason=self.reason if self.status != READY else None,
            detail=self.detail if self.status != READY else None,
            runtime=hello.runtime if hello else None,
            open_count=len(self.conversations), waiting_count=waiting, token_set=self.token_set, origin=self.origin,
            wire=str(hello.wire) if hello else None, caps=list(hello.caps) if hello else [],
            subtitle=self.subtitle, instance=self.instance, last_ok=self.last_ok,
        )

    # --- internals ----------------------------------------------------------------------------
    def _ok(self, now: float) -> list[str]:
        lines = []
        if self.status in (UNREACHABLE, STARTING) and self.hello is not None:
            if self.status == UNREACHABLE:
                lines.append(f"[durable] {self.name}: reachable again")
            else:
                lines.append(f"[durable] {self.name}: ready ({self.hello.runtime or 'durable'}, wire "
                             f"{OURS.highest_common(self.hello.wire)}, {len(self.conversations)} open)")
            self.status, self.reason, self.detail = READY, None, None
        self.last_ok = now
        return lines

    def _forget_positions(self) -> None:
        for log in self.logs.values():
            log.since = 0

    def _cut_once(self, key: str, line: str) -> list[str]:
        if key in self.cut_logged:
            return []
        self.cut_logged.add(key)
        return [line]

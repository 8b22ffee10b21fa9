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

What it costs (issues 16.3, 9.6) — every agent is untrusted, so what is kept is bounded:
- A state answer re-parses only the conversations whose object changed since the last one (parsed
  views are kept by id beside the raw object they came from), so a change costs the same with 1 or
  1,000 open conversations. Parsing is split from applying (`prepare_state` / `apply_state`,
  `prepare_items` / `apply_items`) so the poller can run a large parse in a worker thread.
- At most `MAX_CONVERSATIONS` open conversations are read per agent (the rest are left out, logged
  once); at most `KEEP_ITEMS` items per conversation and about `KEEP_BYTES` of items per agent are
  kept: older items are dropped, and Chat shows the S3 left-out line where they were.
- Items are served by revision (`items_page`), like the wire: a change to an earlier item (a tool
  call that completed) reaches a client that follows `next_since`.
"""

from __future__ import annotations

import attrs

from collie.crew.asks import AskView, sanitize_actions, sanitize_ask, sanitize_item
from collie.crew.views import READY, STARTING, UNREACHABLE, VERSION_MISMATCH, AgentStatus, keep_conversations
from collie.crew.wire import (OURS, Conversation, HelloAnswer, ItemsPage, State, WireError, WireRange, structure,
                              unstructure, utc_time)

LEFT_OUT = "Older messages were left out: the durable agent no longer keeps them."

MAX_CONVERSATIONS = 1000  # open conversations read per agent
KEEP_ITEMS = 2000  # items kept per conversation (the SDK's own default history)
KEEP_BYTES = 16 * 1024 * 1024  # items kept per agent, estimated by `item_cost`
ITEM_OVERHEAD = 400  # what a small item costs in memory beyond its strings (dict, ints, keys)
PAGE_LIMIT = 200  # items per answer to the phone, by default
PAGE_LIMIT_MAX = 500
PAGE_BYTES = 1024 * 1024  # an answer stops adding items past this (it always holds at least one)
DROP_ALL = 2**62  # `take_dirty`'s drop-below seq when the agent lost its items: the cache drops every one


def item_cost(item: dict) -> int:
    """An estimate of the memory one kept item takes: its strings plus a fixed overhead."""
    return ITEM_OVERHEAD + sum(len(v) for v in item.values() if isinstance(v, str))


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


def newest_of(items: list[dict], limit: int = PAGE_LIMIT, before: int | None = None) -> dict:
    """`AgentReader.items_newest` over a list of items in seq order (a closed conversation's, read
    through from its agent): the newest `limit` (before seq `before`), with `next_since` and `earlier`."""
    limit = max(1, min(limit, PAGE_LIMIT_MAX))
    held = [i for i in items if isinstance(i, dict) and isinstance(i.get("seq"), int)
            and (before is None or i["seq"] < before)]
    real = [i for i in held if i.get("kind") != "gap"]
    page = real[-limit:]
    first = page[0]["seq"] if page else None
    out = [i for i in held if first is not None and i["seq"] >= first]
    revs = [i["rev"] for i in items if isinstance(i, dict) and isinstance(i.get("rev"), int)]
    return {"items": out, "next_since": max([0, *revs]), "more": False,
            "earlier": first if len(page) < len(real) else None}


@attrs.define
class ItemLog:
    """The items Collie holds of one conversation, by seq, and where it knows it missed some."""

    items: dict[int, dict] = attrs.Factory(dict)
    since: int = 0
    gaps: set[int] = attrs.Factory(set)  # a seq before which items were left out
    dirty: dict[int, dict] = attrs.Factory(dict)  # changed since the cache last saved
    seen: dict[int, float] = attrs.Factory(dict)  # seq -> when the bridge first read it (C4)
    costs: dict[int, int] = attrs.Factory(dict)  # seq -> item_cost of the item kept
    cost: int = 0  # sum of `costs`
    dropped_below: int = 0  # items under this seq were dropped here (the cache drops them too)
    top: int = 0  # the highest seq ever held
    drop_pending: bool = False  # the cache has not dropped what was dropped here yet
    reset_pending: bool = False  # the agent lost its state: the cache must drop every item it holds of it
    reread: bool = False  # the agent restarted: read from 0 once, whatever its items_rev

    def next_seq(self) -> int:
        return max(self.top, max(self.items) if self.items else 0) + 1

    def put(self, seq: int, item: dict, cost: int | None = None) -> None:
        cost = item_cost(item) if cost is None else cost
        self.cost += cost - self.costs.get(seq, 0)
        self.items[seq] = self.dirty[seq] = item
        self.costs[seq] = cost
        if seq > self.top:
            self.top = seq

    def drop_oldest(self, n: int) -> None:
        """Drop the `n` oldest items (always keeping the newest); the left-out line goes where they were."""
        order = sorted(self.items)
        n = min(n, len(order) - 1)
        if n <= 0:
            return
        for seq in order[:n]:
            del self.items[seq]
            self.cost -= self.costs.pop(seq)
            self.dirty.pop(seq, None)
            self.seen.pop(seq, None)
        first = order[n]
        self.gaps = {g for g in self.gaps if g > first} | {first}
        self.dropped_below = max(self.dropped_below, first)
        self.drop_pending = True


@attrs.frozen
class PreparedState:
    """A state answer parsed (maybe in a worker thread), not yet applied."""

    state: State  # its conversations list is empty: they are in `views`
    views: dict[str, ConversationView]
    parsed: dict[str, tuple[dict, ConversationView]]
    notes: list[tuple[str, str]]  # (once-key, log line)
    reparsed: int  # how many conversations were parsed (the others were unchanged)
    kept: list | None = None  # the raw conversations kept, when the state listed more than are read
    left_out: int = 0  # open conversations not read (collie.crew.views.keep_conversations)


@attrs.frozen
class PreparedItems:
    page: ItemsPage
    clean: list[dict]
    costs: list[int]  # item_cost of each, computed with the parse


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
        # False once `stale_conversations` found none and no state, items page or cache was applied
        # since: an idle long-poll answered 304 then costs no walk over every conversation (issue 16)
        self._maybe_stale = True
        self.last_ok: float | None = None
        self.cut_logged: set[str] = set()
        self.raw_hello: object | None = None
        self.raw_state: object | None = None
        self.remote = not local
        self._saved: set[str] = set()
        self._parsed: dict[str, tuple[dict, ConversationView]] = {}  # id -> (raw object, its view)
        self.reparsed = 0  # conversations parsed by the last state answer (for tests and benches)
        self.left_out = 0  # open conversations the agent listed and this view does not hold (the list's footer)

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
            self.etag = None
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
            prepared = self.prepare_state(data)
        except WireError as exc:
            return self.on_failure("protocol", f"the agent's state does not fit wire v1: {exc}"), []
        return self.apply_state(prepared, data, etag, now)

    def prepare_state(self, data: object) -> PreparedState:
        """Parse a state answer; only conversations whose object changed are parsed again.
        Reads the reader but changes nothing in it (safe in a worker thread). Raises WireError."""
        if not isinstance(data, dict) or not isinstance(data.get("conversations", []), list):
            raise WireError("State: expected an object with a list of conversations @ $")
        raws = data.get("conversations", [])
        head = structure({k: v for k, v in data.items() if k != "conversations"}, State)
        notes: list[tuple[str, str]] = []
        kept, left_out = None, 0
        if len(raws) > MAX_CONVERSATIONS:
            notes.append(("conversations:over", f"[durable] {self.name}: {len(raws)} open conversations; only "
                                                f"{MAX_CONVERSATIONS} are read (waiting, working, then the newest)"))
            raws = kept = keep_conversations(raws, MAX_CONVERSATIONS)[0]
            left_out = len(data["conversations"]) - len(kept)
        views: dict[str, ConversationView] = {}
        parsed: dict[str, tuple[dict, ConversationView]] = {}
        count = 0
        for raw in raws:
            known = self._parsed.get(raw.get("id")) if isinstance(raw, dict) and isinstance(raw.get("id"), str) else None
            if known is not None and known[0] == raw:
                view = known[1]
            else:
                try:
                    conv = structure(raw, Conversation)
                except WireError as exc:
                    raise WireError(f"{exc} @ $.conversations[{len(views)}]") from None
                view, more = self._view(conv)
                notes += more
                count += 1
            views[view.id] = view
            parsed[view.id] = (raw, view)
        return PreparedState(state=head, views=views, parsed=parsed, notes=notes, reparsed=count, kept=kept,
                             left_out=left_out)

    def is_older(self, prepared: PreparedState) -> bool:
        """A state read that finished after a newer one was applied (same instance, lower rev)."""
        return prepared.state.instance == self.instance and prepared.state.rev < self.rev and self.hello is not None

    def apply_state(self, prepared: PreparedState, data: object, etag: str | None,
                    now: float) -> tuple[list[str], list[str]]:
        state = prepared.state
        lines = []
        if self.instance is not None and state.instance != self.instance:
            self.hello = None  # hello again before trusting anything else (W3)
            lines.append(f"[durable] {self.name}: the agent restarted (instance {state.instance}); saying hello again")
            self.instance = state.instance
            self._forget_positions()
            self.etag = None
            return lines, []
        for key, line in prepared.notes:
            lines += self._cut_once(key, line)
        views = prepared.views
        self.reparsed = prepared.reparsed
        self.conversations = views
        self._parsed = prepared.parsed
        self._maybe_stale = True
        if isinstance(data, dict) and prepared.kept is not None:
            data = {**data, "conversations": prepared.kept}  # keep no more than is read
        self.left_out = prepared.left_out
        self.raw_state = data
        for gone in set(self.logs) - set(views):  # closed conversations are read from the agent, not kept
            del self.logs[gone]
        self.starters = [unstructure(s) for s in state.starters]
        self.subtitle = state.subtitle if state.subtitle is not None else self.subtitle
        self.rev, self.etag = state.rev, etag
        lines += self._ok(now)
        stale = [cid for cid, v in views.items() if self._unread(cid, v.items_rev)]
        return lines, stale

    def _view(self, conv: Conversation) -> tuple[ConversationView, list[tuple[str, str]]]:
        notes: list[tuple[str, str]] = []
        remote = self.remote
        asks = []
        for raw in conv.asks:
            view = sanitize_ask(raw, remote=remote) if isinstance(raw, dict) else None
            if view is None:
                notes.append((f"{conv.id}:badask", f"[durable] {self.name}: conversation {conv.id}: "
                                                   "an ask without an id was ignored"))
                continue
            if view.shortened:
                notes.append((f"ask:{view.id}", f"[durable] {self.name}: ask {view.id}: over the "
                                                "limits; shown shortened (Text shortened)"))
            if not view.answerable:
                notes.append((f"kind:{view.id}", f"[durable] {self.name}: ask {view.id}: kind "
                                                 f"{view.kind!r} is unknown; shown read-only"))
            asks.append(view)
        actions, actions_cut = sanitize_actions(conv.actions)
        if actions_cut:
            notes.append((f"actions:{conv.id}", f"[durable] {self.name}: conversation {conv.id}: "
                                                "actions over the limits were cut"))
        return ConversationView(
            id=conv.id, title=conv.title, subtitle=conv.subtitle,
            workspace=(conv.workspace.title or conv.workspace.id) if conv.workspace else None,
            tab=(conv.tab.title or conv.tab.id) if conv.tab else None, harness=conv.harness,
            state=conv.state if conv.state in ("idle", "working", "waiting") else "idle", turn=conv.turn,
            activity=utc_time(conv.activity), progress=unstructure(conv.progress) if conv.progress else None,
            asks=asks, actions=actions, actions_cut=actions_cut, items_rev=conv.items_rev), notes

    def on_not_modified(self, now: float) -> list[str]:
        return self._ok(now)

    def on_items(self, conv_id: str, data: object, now: float = 0.0) -> tuple[list[str], bool]:
        """Merge one page; returns (log lines, whether another page follows)."""
        try:
            prepared = self.prepare_items(data)
        except WireError as exc:
            return self._cut_once(f"items:{conv_id}", f"[durable] {self.name}: conversation {conv_id}: items do "
                                                      f"not fit wire v1 ({exc}); keeping what was read"), False
        return self.apply_items(conv_id, prepared, now)

    @staticmethod
    def prepare_items(data: object) -> PreparedItems:
        """Parse and sanitize one items page (pure: safe in a worker thread). Raises WireError."""
        page = structure(data, ItemsPage)
        clean = []
        for item in page.items:
            raw = unstructure(item)
            clean.append(sanitize_item({k: v for k, v in raw.items() if v is not None}))
        return PreparedItems(page=page, clean=clean, costs=[item_cost(i) for i in clean])

    def apply_items(self, conv_id: str, prepared: PreparedItems, now: float) -> tuple[list[str], bool]:
        page = prepared.page
        if conv_id not in self.conversations:
            return [], False  # closed meanwhile: nothing is kept of it
        log = self.logs.setdefault(conv_id, ItemLog())
        if log.items and (page.items_rev < log.since or page.last < log.top):
            # wire §5: revisions behind what was read, or a transcript ending before a seq we hold (an
            # agent only drops from the start): the agent lost its state. What we hold of it is not the
            # agent's any more; read again from 0 (a phone following `next_since` then gets `reset`).
            self.logs[conv_id] = ItemLog(reset_pending=True)
            self._maybe_stale = True
            return [f"[durable] {self.name}: conversation {conv_id}: the agent lost its items (it lists up to "
                    f"seq {page.last}, rev {page.items_rev}); reading it again from the start"], True
        if page.first_kept > log.next_seq() and page.first_kept not in log.gaps:
            log.gaps.add(page.first_kept)  # S3: dropped before we read them
        for clean, cost in zip(prepared.clean, prepared.costs):
            seq = clean["seq"]
            if seq < log.dropped_below:
                continue  # dropped here to stay under the caps; the left-out line stands for it
            log.put(seq, clean, cost)
            log.seen.setdefault(seq, now)
        log.since, log.reread = page.next_since, False
        self._maybe_stale = True
        lines = self._trim(conv_id, log)
        return lines, page.more

    def _trim(self, conv_id: str, log: ItemLog) -> list[str]:
        """Keep at most KEEP_ITEMS per conversation and about KEEP_BYTES per agent (oldest items go first,
        from the conversations that hold the most)."""
        lines: list[str] = []
        if len(log.items) > KEEP_ITEMS:
            log.drop_oldest(len(log.items) - KEEP_ITEMS)
            lines += self._cut_once(f"keep:{conv_id}", f"[durable] {self.name}: conversation {conv_id}: over "
                                                       f"{KEEP_ITEMS} items; older ones are left out")
        total = sum(g.cost for g in self.logs.values())
        if total <= KEEP_BYTES:
            return lines
        lines += self._cut_once("keep:bytes", f"[durable] {self.name}: items over {KEEP_BYTES // (1024 * 1024)} MiB; "
                                              "older ones are left out")
        for _ in range(len(self.logs)):
            if total <= KEEP_BYTES:
                break
            big = max(self.logs.values(), key=lambda g: g.cost)
            if len(big.items) <= 1:
                break
            order = sorted(big.items)
            freed, n = 0, 0
            while n < len(order) - 1 and total - freed > KEEP_BYTES:
                freed += big.costs[order[n]]
                n += 1
            before = big.cost
            big.drop_oldest(n)
            total -= before - big.cost
        return lines

    def on_failure(self, reason: str, detail: str) -> list[str]:
        changed = (self.status, self.reason, self.detail) != (UNREACHABLE, reason, detail)
        if self.status != VERSION_MISMATCH or reason != "version":
            self.status, self.reason, self.detail = UNREACHABLE, reason, detail
        if reason in ("connection-refused", "no-socket", "timeout", "closed"):
            self.hello = None  # the agent may come back as another instance
        return [f"[durable] {self.name}: unreachable: {reason}: {detail}"] if changed else []

    def stale_conversations(self) -> list[str]:
        """Open conversations whose items changed since the bridge last read them."""
        if not self._maybe_stale:
            return []
        stale = [cid for cid, v in self.conversations.items() if self._unread(cid, v.items_rev)]
        self._maybe_stale = bool(stale)
        return stale

    def _unread(self, conv_id: str, items_rev: int) -> bool:
        log = self.logs.get(conv_id)
        return log is None and items_rev != 0 or log is not None and (log.since != items_rev or log.reread)

    def items_since(self, conv_id: str) -> int:
        log = self.logs.get(conv_id)
        return log.since if log else 0

    def take_dirty(self) -> dict:
        """What the cache must write: per conversation (since, gaps, changed items, drop items below seq)."""
        out = {}
        for cid, log in self.logs.items():
            if log.dirty or cid not in self._saved or log.drop_pending or log.reset_pending:
                out[cid] = (log.since, set(log.gaps), log.dirty, DROP_ALL if log.reset_pending else log.dropped_below)
                log.dirty, log.drop_pending, log.reset_pending = {}, False, False
                self._saved.add(cid)
        return out

    def untake_dirty(self, taken: dict) -> None:
        """A cache save of `taken` (from `take_dirty`) failed: mark it to be written at the next save."""
        for cid, (_since, _gaps, items, drop_below) in taken.items():
            log = self.logs.get(cid)
            if log is None:
                continue  # closed meanwhile: the next save deletes it from the cache
            if drop_below == DROP_ALL:  # all of it is to be written again, after the old items go
                log.reset_pending, log.dirty = True, dict(log.items)
            for seq in items:
                if seq in log.items and seq not in log.dirty:
                    log.dirty[seq] = log.items[seq]
            log.drop_pending = log.drop_pending or bool(drop_below)
            self._saved.discard(cid)

    def restore(self, cached: dict) -> None:
        """Fill the view from the cache at start: panes open at once; status stays `starting`."""
        try:
            hello = structure(cached["hello"], HelloAnswer) if cached.get("hello") else None
            prepared = self.prepare_state(cached["state"]) if cached.get("state") else None
        except WireError:
            return
        if hello is None or prepared is None or OURS.highest_common(hello.wire) is None:
            return
        state = prepared.state
        self.instance, self.subtitle, self.raw_hello, self.raw_state = state.instance, state.subtitle, cached["hello"], cached["state"]
        self.conversations, self._parsed = prepared.views, prepared.parsed
        self._maybe_stale = True
        self.starters = [unstructure(s) for s in state.starters]
        self.rev = state.rev
        self.etag = cached.get("etag")
        for cid, (since, gaps) in cached.get("logs", {}).items():
            if cid in self.conversations:
                log = self.logs[cid] = ItemLog(since=since, gaps=set(gaps))
                for seq, item in cached["items"].get(cid, {}).items():
                    log.put(seq, item)
                log.dirty = {}
                self._saved.add(cid)
                self._trim(cid, log)

    # --- reading back -------------------------------------------------------------------------
    def items_page(self, conv_id: str, since: int = 0, limit: int = PAGE_LIMIT) -> dict:
        """Items of an open conversation whose `rev` is above `since`, lowest `rev` first, as the wire
        pages them (wire §5): at most `limit` items and about PAGE_BYTES; `next_since` is what to ask
        next. A `gap` marker item comes before the item at a seq where older ones were left out (S3).
        A `since` beyond what the bridge has read (the agent's revisions started over) answers from 0
        with `reset: true`: the client drops what it holds of this conversation."""
        log = self.logs.get(conv_id)
        if log is None:
            return {"items": [], "next_since": 0, "more": False, "reset": since > 0}
        reset = since > log.since
        if reset:
            since = 0
        limit = max(1, min(limit, PAGE_LIMIT_MAX))
        changed = sorted((i for i in log.items.values() if i.get("rev", 0) > since), key=lambda i: i.get("rev", 0))
        out: list[dict] = []
        size, taken, last = 0, 0, since
        for item in changed:
            if taken >= limit or (taken and size >= PAGE_BYTES):
                break
            if item["seq"] in log.gaps:
                out.append({"kind": "gap", "seq": item["seq"], "text": LEFT_OUT})
            out.append(item)
            taken += 1
            size += log.costs.get(item["seq"], 0)
            last = item.get("rev", 0)
        more = taken < len(changed)
        return {"items": out, "next_since": last if more else max(last, log.since), "more": more, "reset": reset}

    def items_newest(self, conv_id: str, limit: int = PAGE_LIMIT, before: int | None = None) -> dict:
        """Issue 39: the newest `limit` items of an open conversation by position (seq), or the `limit`
        just before seq `before`, oldest first, at most about PAGE_BYTES (always at least one): what a chat
        draws when it opens, in one read. `next_since` is the highest revision read (a later read by
        revision from it gives only what changed); `earlier` is the `before` of the page above, or None
        when nothing older is held. A `gap` marker comes before an item where older ones were left out."""
        log = self.logs.get(conv_id)
        if log is None:
            return {"items": [], "next_since": 0, "more": False, "earlier": None}
        limit = max(1, min(limit, PAGE_LIMIT_MAX))
        order = sorted(s for s in log.items if before is None or s < before)
        taken: list[int] = []
        size = 0
        for seq in reversed(order):
            if len(taken) >= limit or (taken and size >= PAGE_BYTES):
                break
            taken.append(seq)
            size += log.costs.get(seq, 0)
        taken.reverse()
        out: list[dict] = []
        for seq in taken:
            if seq in log.gaps:
                out.append({"kind": "gap", "seq": seq, "text": LEFT_OUT})
            out.append(log.items[seq])
        earlier = taken[0] if taken and len(taken) < len(order) else None
        return {"items": out, "next_since": log.since, "more": False, "earlier": earlier}

    def items(self, conv_id: str, since: int = 0, limit: int = PAGE_LIMIT) -> list[dict]:
        """The items of `items_page` alone."""
        return self.items_page(conv_id, since, limit)["items"]

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
            subtitle=self.subtitle, instance=self.instance,
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
        """The agent restarted: its `rev` counters may have started over (wire §3), so nothing read
        from the last instance says whether an answer of this one is older."""
        self.rev = 0
        for log in self.logs.values():
            log.since, log.reread = 0, True  # even at items_rev 0: an agent that lost all has to say so
        self._maybe_stale = True
        self._parsed = {}

    def _cut_once(self, key: str, line: str) -> list[str]:
        if key in self.cut_logged:
            return []
        self.cut_logged.add(key)
        return [line]

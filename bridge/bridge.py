"""The bridge: one task tree per attached agent, and the board the CLI, the doctor and the lead read.

At start each agent's address is checked against the transport rules that need no I/O (features
A9, T1, T4, T5): an entry that breaks one shows Unreachable with the reason and is not polled,
instead of stopping the bridge. Socket privacy (T2) is checked by the poller before every request,
so fixing a folder's mode recovers the agent without a restart. Each agent's view is restored from
its cache at start, so panes open at once while the agent is slow or down (S2).

Reads of closed conversations always go to the agent (S2, L4); the result says which L5 footer
applies when it fails.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from urllib.parse import quote

import attrs
import trio

from collie.bridge.cache import Cache
from collie.bridge.client import STATE_CAP, AgentClient, AgentUnreachable, path_id
from collie.bridge.poller import INLINE_MAX, AgentPoller
from collie.bridge.reader import (KEEP_ITEMS, PAGE_BYTES, PAGE_LIMIT, PAGE_LIMIT_MAX, AgentReader, ConversationView,
                                  phone_mismatch)
from collie.crew import logs
from collie.crew.config import AgentConfig, BridgeConfig
from collie.crew.fsutil import ensure_private_dir
from collie.crew.paths import Paths
from collie.crew.security import Problem, check_socket_shape, check_token, check_url, is_local_url
from collie.crew.views import UNREACHABLE, VERSION_MISMATCH, AgentStatus
from collie.crew.wire import ClosedPage, WireError, structure, unstructure, utc_time

log = logs.get("bridge")

READ_TIMEOUT = 10.0

FOOTER_NO_LIST = "This durable agent doesn't keep a list of its conversations."
FOOTER_NO_ANSWER = "The durable agent didn't answer. Try again in a moment."
FOOTER_FAILED = "Couldn't load the conversations. Try again."


def static_problem(agent: AgentConfig) -> Problem | None:
    """The rules that can be judged without touching the agent."""
    if agent.problem:
        return agent.problem
    if agent.socket:
        return check_socket_shape(agent.socket)
    if agent.url:
        return check_url(agent.url) or check_token(agent.token, f'the "token" of {agent.name}')
    return Problem("config", "no socket or url is configured")


def is_local(agent: AgentConfig) -> bool:
    return bool(agent.socket) or (bool(agent.url) and is_local_url(agent.url))


@attrs.frozen
class ClosedRead:
    """A read of the closed list: rows, the next cursor, or the L5 footer to show."""

    conversations: list[dict] = attrs.Factory(list)
    next: str | None = None
    footer: str | None = None
    reason: str | None = None


class Bridge:
    def __init__(self, config: BridgeConfig, paths: Paths, *, host: str | None = None,
                 client_factory: Callable[[AgentConfig], AgentClient] = AgentClient, use_cache: bool = True) -> None:
        self.config = config
        self.paths = paths
        self.host = host or socket.gethostname()
        self.agents = {a.name: a for a in config.agents}
        self.readers: dict[str, AgentReader] = {}
        self.pollers: dict[str, AgentPoller] = {}
        self.client_factory = client_factory
        self.use_cache = use_cache
        self.caches: dict[str, Cache] = {}
        self._changed = trio.Event()
        self.on_agent_change: list[Callable[[str], None]] = []  # e.g. the lead's live channel
        for agent in config.agents:
            reader = AgentReader(agent.name, transport=agent.transport, address=agent.address, local=is_local(agent),
                                 token_set=bool(agent.token), origin=agent.origin)
            self.readers[agent.name] = reader
            problem = static_problem(agent)
            if problem:
                reader.on_failure(problem.code, problem.text)
                log.info("[durable] %s: unreachable: %s: %s", agent.name, problem.code, problem.text)

    # --- reading the board ----------------------------------------------------------------
    def snapshot(self) -> list[AgentStatus]:
        return [r.status_view() for r in self.readers.values()]

    def status(self, name: str) -> AgentStatus:
        return self.readers[name].status_view()

    def conversations(self, name: str) -> list[ConversationView]:
        return list(self.readers[name].conversations.values())

    def items(self, name: str, conv_id: str, since: int = 0) -> list[dict]:
        """Items of an open conversation whose `rev` is above `since` (one bounded page)."""
        return self.readers[name].items(conv_id, since)

    def items_page(self, name: str, conv_id: str, since: int = 0, limit: int = PAGE_LIMIT) -> dict:
        """One page of an open conversation's items by revision: items, next_since, more, reset."""
        return self.readers[name].items_page(conv_id, since, limit)

    def items_newest(self, name: str, conv_id: str, limit: int = PAGE_LIMIT, before: int | None = None) -> dict:
        """The newest page of an open conversation's items by position (issue 39): items, next_since, earlier."""
        return self.readers[name].items_newest(conv_id, limit, before)

    def warning(self, name: str) -> str | None:
        reader = self.readers[name]
        return phone_mismatch(reader.theirs) if reader.status == VERSION_MISMATCH and reader.theirs else None

    def set_viewing(self, name: str, on: bool) -> None:
        poller = self.pollers.get(name)
        if poller is not None:
            poller.set_viewing(on)

    def read_soon(self, name: str) -> None:
        """Someone waits for `name`'s next change (an inbox item waits for its turn to end): read it
        at once instead of after the burst gap (issue 16.1). Cheap; calls before the read coalesce."""
        poller = self.pollers.get(name)
        if poller is not None:
            poller.read_soon()

    async def wait_changed(self) -> None:
        await self._changed.wait()

    def _on_change(self, name: str) -> None:
        self._changed.set()
        self._changed = trio.Event()
        for fn in self.on_agent_change:
            fn(name)

    def statistics(self) -> dict:
        return {name: p.statistics() for name, p in self.pollers.items()}

    # --- read-through -----------------------------------------------------------------------
    async def read_closed(self, name: str, cursor: str | None = None) -> ClosedRead:
        """L4, L5: the closed list, always from the agent; a failure names its footer."""
        reader = self.readers[name]
        if reader.status == VERSION_MISMATCH and reader.theirs:
            return ClosedRead(footer=phone_mismatch(reader.theirs), reason="version")
        if reader.hello is None or "history" not in reader.hello.caps:
            return ClosedRead(reason="no_history")  # L6: no Closed group, no note
        path = "/v1/conversations?state=closed&limit=100" + (f"&cursor={quote(cursor, safe='')}" if cursor else "")
        try:
            answer = await self._client(name).request("GET", path, timeout=READ_TIMEOUT, cap=STATE_CAP, through=True)
            page = structure(answer.body, ClosedPage)
        except AgentUnreachable as exc:
            if exc.reason == "no_list":
                return ClosedRead(footer=FOOTER_NO_LIST, reason="no_list")
            if exc.reason == "version":
                return ClosedRead(footer=phone_mismatch(reader.theirs) if reader.theirs else FOOTER_FAILED,
                                  reason="version")
            if exc.reason in ("timeout", "connection-refused", "no-socket", "closed"):
                return ClosedRead(footer=FOOTER_NO_ANSWER, reason=exc.reason)
            return ClosedRead(footer=FOOTER_FAILED, reason=exc.reason)
        except WireError:
            return ClosedRead(footer=FOOTER_FAILED, reason="protocol")
        rows = [unstructure(c) for c in page.conversations]
        for row in rows:  # wire §1 times in the one form the phone reads
            row["closed_at"], row["activity"] = utc_time(row.get("closed_at")), utc_time(row.get("activity"))
        return ClosedRead(conversations=rows, next=page.next)

    async def read_items_page(self, name: str, conv_id: str, since: int = 0, limit: int = PAGE_LIMIT) -> dict:
        """One page of a closed conversation's items, read from the agent (never from the cache), by
        revision as the wire pages them: {items, next_since, more}. Bounded like an open one's page."""
        limit = max(1, min(limit, PAGE_LIMIT_MAX))
        path = f"/v1/conversations/{path_id(conv_id)}/items?since={since}&limit={limit}"
        answer = await self._client(name).request("GET", path, timeout=READ_TIMEOUT, cap=STATE_CAP, through=True)
        body = answer.body
        try:
            if isinstance(body, dict) and isinstance(body.get("items"), list) and len(body["items"]) > INLINE_MAX:
                prepared = await trio.to_thread.run_sync(AgentReader.prepare_items, body)
            else:
                prepared = AgentReader.prepare_items(body)
        except WireError as exc:
            raise AgentUnreachable("protocol", str(exc)) from None
        page, out, size = prepared.page, [], 0
        for item, cost in zip(prepared.clean, prepared.costs):
            if out and size >= PAGE_BYTES:
                break
            out.append(item)
            size += cost
        if len(out) < len(prepared.clean):
            return {"items": out, "next_since": out[-1]["rev"], "more": True}
        return {"items": out, "next_since": page.next_since, "more": page.more}

    async def read_items_through(self, name: str, conv_id: str, since: int = 0) -> list[dict]:
        """Items of a closed conversation in seq order, at most KEEP_ITEMS of them (the newest revisions
        win). For callers that want a list; the phone's route pages with `read_items_page`."""
        out: dict[int, dict] = {}
        for _ in range(KEEP_ITEMS // PAGE_LIMIT_MAX + 1):
            page = await self.read_items_page(name, conv_id, since, PAGE_LIMIT_MAX)
            out.update((i["seq"], i) for i in page["items"])
            since = page["next_since"]
            if not page["more"] or len(out) >= KEEP_ITEMS:
                break
        return [out[seq] for seq in sorted(out)][-KEEP_ITEMS:]

    def _client(self, name: str) -> AgentClient:
        poller = self.pollers.get(name)
        if poller is None or poller.client is None:
            raise AgentUnreachable("config", "this agent is not being reached")
        return poller.client

    # --- running ----------------------------------------------------------------------------
    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Run every agent's task tree until cancelled; a hung agent never delays another."""
        try:
            async with trio.open_nursery() as nursery:
                for agent in self.config.agents:
                    reader = self.readers[agent.name]
                    if reader.status == UNREACHABLE and static_problem(agent):
                        continue
                    cache = self._open_cache(agent.name)
                    poller = AgentPoller(agent, reader, host=self.host, on_change=self._on_change, cache=cache,
                                         client_factory=self.client_factory)
                    self.pollers[agent.name] = poller
                    nursery.start_soon(poller.run, name=f"agent:{agent.name}")
                task_status.started()
        finally:
            for cache in self.caches.values():
                cache.close()

    def _open_cache(self, name: str) -> Cache | None:
        if not self.use_cache:
            return None
        try:
            ensure_private_dir(self.paths.agent_dir(name))
            cache = Cache(self.paths.agent_dir(name) / "cache.sqlite")
            self.readers[name].restore(cache.load())
        except Exception as exc:  # a broken cache costs a re-read, never the agent
            log.warning("[durable] %s: cache unusable (%s); reading the agent afresh", name, exc)
            return None
        self.caches[name] = cache
        return cache

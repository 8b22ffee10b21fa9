"""One agent's task tree: say hello, poll, read items, cache, and recover — never blocking another agent.

Cadence (features W5): every 10 s, every 2 s while a phone views the agent. Where the agent
declared `watch`, a long-poll (`?wait=30`) replaces the sleep: a change arrives at once and an idle
agent costs one request per 30 s. When the next read starts is decided by `collie.bridge.pace.ReadPace`:
a change after a quiet spell and a poke (a write went through, someone waits for a turn to end) are
read at once, and so is the change right after a short one (a few words, then an ask); only a
sustained burst is paced, `MIN_GAP` apart (`VIEWED_GAP` while a phone views the agent), so an agent
streaming a reply is read a few times a second, not once per word (20 times while viewed).

Failures: a dropped connection is retried at once (up to 3 times) (a kept-alive connection may have died with
an agent restart); otherwise the reason is shown (`unreachable`), the last good view is kept, and the next try comes
after a backoff of 1, 2, 4 … seconds, never longer than the cadence. A version mismatch reads only
`/hello`, every 10 s, to notice an upgrade (wire-v1 §2).
"""

from __future__ import annotations

import socket
import sqlite3
from collections.abc import Callable

import trio

from collie.bridge.cache import Cache
from collie.bridge.client import STATE_CAP, AgentClient, AgentUnreachable, path_id
from collie.bridge.pace import MIN_GAP, VIEWED_GAP, ReadPace
from collie.bridge.reader import AgentReader
from collie.crew import __version__, logs
from collie.crew.config import AgentConfig
from collie.crew.views import READY, VERSION_MISMATCH
from collie.crew.wire import ITEMS_LIMIT_DEFAULT, OURS, WAIT_MAX, WireError

log = logs.get("durable")

IDLE_EVERY = 10.0
VIEWED_EVERY = 2.0
HELLO_RETRY = 10.0
WATCH_WAIT = WAIT_MAX
HELLO_TIMEOUT = 5.0
STATE_TIMEOUT = 5.0
ITEMS_TIMEOUT = 10.0
ITEM_PAGES_MAX = 50  # per read; the rest comes at the next poll
INLINE_MAX = 50  # conversations in a state, or items in a page, parsed on the event loop; more go to a thread
SAVE_GAP = 1.0  # the cache is written at most this often per agent (it only speeds a restart up)
CLOSED_RETRIES = 3  # the pool keeps at most 2 idle connections; each may have died with the agent


class AgentPoller:
    def __init__(self, agent: AgentConfig, reader: AgentReader, *, host: str | None = None,
                 on_change: Callable[[str], None] = lambda name: None, cache: Cache | None = None,
                 client_factory: Callable[[AgentConfig], AgentClient] = AgentClient) -> None:
        self.agent = agent
        self.reader = reader
        self.host = host or socket.gethostname()
        self.on_change = on_change
        self.cache = cache
        self.client_factory = client_factory
        self.viewers = 0
        self._wake = trio.Event()
        self.pace = ReadPace()
        self._parsing = trio.CapacityLimiter(1)
        self._save_wanted = trio.Event()
        self.client: AgentClient | None = None
        self.polls = 0
        self.not_modified = 0
        self.save_failing = False  # the last cache save failed (logged once until one succeeds)

    # --- control ---------------------------------------------------------------------------
    def set_viewing(self, on: bool) -> None:
        self.viewers = max(0, self.viewers + (1 if on else -1))
        self.pace.set_gap(VIEWED_GAP if self.viewers else MIN_GAP, trio.current_time())
        self.poke()

    def poke(self) -> None:
        """Read now (a phone started viewing, a write just went through), even inside a burst."""
        self.pace.poke()
        self._wake.set()

    def read_soon(self) -> None:
        """Someone waits for this agent's next change (a turn to end): read at once, and without
        `watch` keep reading every `MIN_GAP` until a read sees a change. Calls coalesce."""
        self.pace.poke(eager=True)
        self._wake.set()

    @property
    def cadence(self) -> float:
        return VIEWED_EVERY if self.viewers else IDLE_EVERY

    async def _sleep(self, seconds: float) -> None:
        """Wait `seconds`, or less if poked."""
        if seconds > 0 and not self.pace.poked:
            with trio.move_on_after(seconds):
                await self._wake.wait()
        else:
            await trio.lowlevel.checkpoint()  # never a loop without one, whatever pokes the poller
        self._wake = trio.Event()

    def _starting(self) -> None:
        self.pace.started(trio.current_time())
        self._wake = trio.Event()

    def _emit(self, lines: list[str]) -> None:
        for line in lines:
            log.info("%s", line)

    def _changed(self) -> None:
        self.on_change(self.agent.name)

    # --- the loop ---------------------------------------------------------------------------
    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            if self.cache is not None:
                nursery.start_soon(self._saver)
            await self._run()

    async def _saver(self) -> None:
        """Writes the cache on the leading edge, then at most once per `SAVE_GAP`: a burst of writes
        re-reads the agent after each one, and a cache write (a thread hop, a transaction) per read
        cost more than the read itself (issue 15.1). The last state is written when the poller stops."""
        try:
            while True:
                await self._save_wanted.wait()
                self._save_wanted = trio.Event()
                await self._save_now()
                await trio.sleep(SAVE_GAP)
        finally:
            if self._save_wanted.is_set():
                with trio.move_on_after(2, shield=True):
                    await self._save_now()

    async def _run(self) -> None:
        self.client = self.client_factory(self.agent)
        backoff = 1.0
        retried = 0
        try:
            while True:
                try:
                    if self.reader.needs_hello():
                        await self._hello()
                        if self.reader.status == VERSION_MISMATCH:
                            await self._sleep(HELLO_RETRY)
                            continue
                    await self._poll()
                    backoff, retried = 1.0, 0
                except AgentUnreachable as exc:
                    if exc.reason == "closed" and retried < CLOSED_RETRIES:
                        retried += 1  # a dropped keep-alive connection: try again at once
                        continue
                    retried = 0
                    before = self.reader.status_view()
                    self._emit(self.reader.on_failure(exc.reason, exc.detail))
                    if self.reader.status_view() != before:
                        self._changed()
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, self.cadence)
                    continue
                except Exception as exc:  # a bug met on this agent's answer stays with this agent
                    retried = 0
                    before = self.reader.status_view()
                    lines = self.reader.on_failure("bridge-error", f"{type(exc).__name__} while reading it (a Collie bug)")
                    if lines:  # once per spell, with the traceback
                        log.exception("%s", lines[0])
                    if self.reader.status_view() != before:
                        self._changed()
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, self.cadence)
                    continue
                await self._sleep(self.pace.delay(trio.current_time(), long_poll=self._can_watch(),
                                                  cadence=self.cadence))
        finally:
            with trio.move_on_after(2, shield=True):
                await self.client.aclose()

    async def _hello(self) -> None:
        self._starting()  # a hello is a try too: it covers the pokes so far, so a failure waits its backoff
        body = {"collie": __version__, "wire": {"min": OURS.min, "max": OURS.max}, "host": self.host,
                "name": self.agent.name}
        answer = await self.client.request("POST", "/hello", json_body=body, timeout=HELLO_TIMEOUT)
        before = self.reader.status_view()
        self._emit(self.reader.on_hello(answer.body, trio.current_time()))
        if self.reader.status_view() != before:
            self._changed()

    async def _poll(self) -> None:
        """Read the state once, and the items of every conversation whose items moved."""
        reader = self.reader
        # Long-poll only once this run has confirmed the view: a tag restored from the cache must
        # be checked by a plain read first, or an unchanged agent would hold us 30 s in `starting`.
        watch = (reader.hello is not None and "watch" in reader.hello.caps and reader.etag is not None
                 and reader.status == READY)
        path = f"/v1/state?wait={WATCH_WAIT}" if watch else "/v1/state"
        headers = {"if-none-match": reader.etag} if reader.etag else {}
        timeout = STATE_TIMEOUT + (WATCH_WAIT if watch else 0)
        self.polls += 1
        self._starting()
        answer = await self.client.request("GET", path, headers=headers, timeout=timeout, cap=STATE_CAP)
        if answer.status == 304:
            self.not_modified += 1
            was = reader.status  # a 304 changes nothing else of the status (`on_not_modified`)
            self._emit(reader.on_not_modified(trio.current_time()))
            stale = reader.stale_conversations()  # a state read just before a write may have left these
            for conv_id in stale:
                await self._read_items(conv_id)
            if stale:
                await self._save()
            changed = reader.status != was or bool(stale)
            if changed:
                self._changed()
            self.pace.finished(changed)
            if watch:  # held "up to" the wait: the next read comes no sooner than the plain cadence (W5)
                self.pace.not_modified()
            return
        seen = (reader.instance, reader.rev, reader.status)
        got = await self._on_state(answer)
        if got is None:
            return  # a newer read was applied meanwhile
        lines, stale = got
        self._emit(lines)
        if reader.needs_hello():
            self.pace.poke()  # the agent restarted: hello first, then read again at once
            return
        self._changed()  # turns, states and asks are in the view now: whoever waits on them need not wait for items
        if stale:
            for conv_id in stale:
                await self._read_items(conv_id)
            self._changed()
        await self._save()
        unchanged = not stale and (reader.instance, reader.rev, reader.status) == seen
        self.pace.finished(not unchanged)
        if watch and unchanged:  # a 200 that is a 304 in all but name: paced like one (W5)
            self.pace.not_modified()

    def _can_watch(self) -> bool:
        hello = self.reader.hello
        return (hello is not None and "watch" in hello.caps and self.reader.etag is not None
                and self.reader.status == READY)

    async def hello_now(self) -> None:
        """Say hello right now: a write found the agent not greeted since it (re)started (W3)."""
        if self.client is None:
            raise AgentUnreachable("config", "this agent is not being reached")
        await self._hello()

    async def read_now(self) -> None:
        """One plain state read (no long-poll) right now, just before a write: turns and asks only;
        the loop reads the items it left behind (woken here)."""
        if self.client is None:
            return
        reader = self.reader
        headers = {"if-none-match": reader.etag} if reader.etag else {}
        answer = await self.client.request("GET", "/v1/state", headers=headers, timeout=STATE_TIMEOUT, cap=STATE_CAP)
        if answer.status == 304:
            self._emit(reader.on_not_modified(trio.current_time()))
            return
        got = await self._on_state(answer)
        if got is None:
            return
        lines, stale = got
        self._emit(lines)
        if stale:
            self.poke()
        self._changed()

    async def _read_items(self, conv_id: str) -> None:
        for _ in range(ITEM_PAGES_MAX):
            since = self.reader.items_since(conv_id)
            path = f"/v1/conversations/{path_id(conv_id)}/items?since={since}&limit={ITEMS_LIMIT_DEFAULT}"
            try:
                answer = await self.client.request("GET", path, timeout=ITEMS_TIMEOUT, cap=STATE_CAP)
            except AgentUnreachable as exc:
                if exc.reason == "not_found":
                    return  # closed between the state read and this one
                raise
            body = answer.body
            try:
                if isinstance(body, dict) and isinstance(body.get("items"), list) and len(body["items"]) > INLINE_MAX:
                    prepared = await trio.to_thread.run_sync(AgentReader.prepare_items, body, limiter=self._parsing)
                else:
                    prepared = AgentReader.prepare_items(body)
            except WireError:
                self._emit(self.reader.on_items(conv_id, body, trio.current_time())[0])  # logs the misfit once
                return
            lines, more = self.reader.apply_items(conv_id, prepared, trio.current_time())
            self._emit(lines)
            if not more:
                return

    async def _on_state(self, answer) -> tuple[list[str], list[str]] | None:
        """Parse a state answer — in a worker thread when it is large, so no step blocks the event
        loop for long (issue 9.6) — and apply it; None when a newer read was applied meanwhile."""
        reader, body = self.reader, answer.body
        try:
            if isinstance(body, dict) and isinstance(body.get("conversations"), list) and \
                    len(body["conversations"]) > INLINE_MAX:
                prepared = await trio.to_thread.run_sync(reader.prepare_state, body, limiter=self._parsing)
            else:
                prepared = reader.prepare_state(body)
        except WireError as exc:
            return reader.on_failure("protocol", f"the agent's state does not fit wire v1: {exc}"), []
        if reader.is_older(prepared):
            return None
        return reader.apply_state(prepared, body, answer.headers.get("etag"), trio.current_time())

    async def _save(self) -> None:
        """Ask the saver to write the cache (soon: see `_saver`)."""
        if self.cache is not None:
            self._save_wanted.set()
        await trio.lowlevel.checkpoint()

    async def _save_now(self) -> None:
        """Write what changed to the cache. A failed save (the state folder's disk is full) is logged once
        and contained: the view stays in memory, what was not written is written at the next save, and
        the agent keeps being read (a cache is a cache, S2)."""
        if self.cache is None:
            return
        r = self.reader
        dirty = r.take_dirty()
        try:
            await self.cache.save(r.raw_hello, r.raw_state, r.etag, dirty, set(r.conversations))
        except (sqlite3.Error, OSError) as exc:
            r.untake_dirty(dirty)
            if not self.save_failing:
                log.warning("[durable] %s: the cache could not be saved (%s: %s); the view stays in memory and is "
                            "saved again at the next change", self.agent.name, type(exc).__name__, exc)
            self.save_failing = True
            return
        if self.save_failing:
            self.save_failing = False
            log.info("[durable] %s: the cache is saved again", self.agent.name)

    def statistics(self) -> dict:
        c = self.client
        return {"polls": self.polls, "not_modified": self.not_modified, "viewers": self.viewers,
                "requests": c.requests if c else 0, "bytes_in": c.bytes_in if c else 0}


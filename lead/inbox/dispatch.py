"""Running the inbox's items (features I2, I5; crew.md §3, §4; issues 16, 32): the trio side of a dispatch.

`Dispatcher` carries out what the pure pieces decide: for one inbox, InboxCore.plan (what expires, what is
done, what runs next); for one item, the exact request recorded on disk before anything is sent (a resume
sends this very request: never twice), one write through the writer or the hub, and the receipt filed as
InboxCore.settle and Pacing.after say. One item's failure is that item's, never the lead's. It moves
requests and logs; it decides nothing itself.
"""

from __future__ import annotations

import attrs
import trio

from collie.bridge.once import InFlight
from collie.bridge.writes import WriteRequest
from collie.crew import logs
from collie.crew.receipts import Receipt
from collie.lead.inbox.core import LOCAL
from collie.lead.inbox.item import Item
from collie.lead.inbox.sight import Blocked
from collie.lead.inbox.store import STORE_ERRORS

log = logs.get("inbox")


class NotKept(Exception):
    """A dispatch could not record its request on disk first, so it sent nothing (`__cause__`: why)."""


class Dispatcher:
    """Dispatches the items of every inbox, one at a time per agent (`busy`), each once (`inflight`)."""

    def __init__(self, record, core, pace, sight, store, *, writer, hub, sync, poke) -> None:
        """Its collaborators are the inbox's own (collie.lead.inbox.service.Inbox): `sync()` returns once every
        change so far is on disk, `poke(key)` makes the inbox look at `key` at once."""
        self.record, self.core, self.pace, self.sight, self.store = record, core, pace, sight, store
        self.writer, self.hub, self.sync, self.poke = writer, hub, sync, poke
        self.active, self.pending, self.running = record.mem.active, record.mem.pending, record.mem.running
        self.busy: set[tuple[str, str]] = set()  # inboxes with a dispatch in flight
        self.inflight = InFlight()  # item ids being dispatched (collie.bridge.once); a repeat waits them out

    async def dispatch(self, item: Item, req: WriteRequest, *, passed_through: bool = False) -> Receipt:
        """Record the exact request, send it once, and file its receipt. The caller marks the inbox busy."""
        try:
            with self.inflight.hold(item.id):  # a repeat of its id waits it out (Inbox._repeat)
                before = {"state": item.state, "runtime_ref": item.runtime_ref, "request": item.request}
                resumed = item.state == "running" and item.request is not None  # it may have reached the agent
                self.record.set(item, state="running", runtime_ref=None, request=attrs.asdict(req))
                self.line(item, "running %s", item.id)
                try:
                    await self.sync()  # on disk before anything is sent: a resume sends this very request
                except STORE_ERRORS as exc:
                    self.record.set(item, **before)  # as the record still has it: nothing was sent
                    raise NotKept() from exc
                try:
                    if item.machine == LOCAL:
                        rec = await self.writer.write(req)
                    else:
                        rec = await self.hub.write(item.machine, req)
                except Exception as exc:  # one item's failure is that item's, never the lead's
                    log.warning("[inbox] %s/%s: %s: the dispatch raised %s; resumed later", item.machine,
                                item.agent, item.id, type(exc).__name__)
                    rec = Receipt(request_id=req.request_id, op=req.op, outcome="unknown", reason="internal")
                fields = self.core.settle(item, attrs.asdict(rec), passed_through=passed_through, resumed=resumed)
                fields, line = self.pace.after(item, req, rec, fields, trio.current_time(),
                                               locked=self.sight.locked(item), signature=self.sight.signature(item))
                if line is not None:
                    self.line(item, *line)
                self.record.set(item, **fields)
                if item.state == "failed":
                    log.info("[inbox] %s/%s: %s failed: %s", item.machine, item.agent, item.id, item.reason)
                try:
                    await self.sync()
                except STORE_ERRORS:  # the receipt is true and kept in memory; the next commit writes it
                    self.store.failed()
                self.sight.read_again(item.machine, item.agent)
                return rec
        finally:
            self.poke((item.machine, item.agent))

    async def run_item(self, item: Item, req: WriteRequest) -> None:
        key = (item.machine, item.agent)
        try:
            await self.dispatch(item, req)
        except NotKept as exc:  # not recorded (the disk is full): nothing was sent; try again after a pause
            self.pace.retry_at.pop(item.id, None)
            self.store.failed()
            log.info("[inbox] %s/%s: %s waits: not recorded (%s); trying again in %g s", item.machine, item.agent,
                     item.id, exc.__cause__, self.pace.pause(key, trio.current_time()))
        except Exception as exc:  # one item's failure is that item's, never the lead's
            log.warning("[inbox] %s/%s: %s not dispatched: %s", item.machine, item.agent, item.id, type(exc).__name__)
        finally:
            self.busy.discard(key)

    def line(self, item: Item, fmt: str, *args) -> None:
        """Log one line about an item: ITEM_LINES at once, then one every ITEM_LINE_EVERY s; the line after
        a silence says how many were held."""
        held = self.pace.line(item.id, trio.current_time())
        if held is None:
            return
        more = f" ({held} more lines about it held)" if held else ""
        log.info("[inbox] %s/%s: " + fmt + "%s", item.machine, item.agent, *args, more)

    @staticmethod
    def turn(item: Item, reader) -> int | None:
        """The conversation's current turn as the lead sees it (a send's), for the request it sends."""
        conv = reader.conversations.get(item.conversation) if item.kind == "send" and reader is not None else None
        return conv.turn if conv is not None else None

    def look(self, key: tuple[str, str], now: float, clock: float, nursery) -> None:
        """Look at one inbox: carry out InboxCore.plan (expire, done, read again) and start its next dispatch."""
        machine, agent = key
        reader = self.sight.reader(machine, agent)
        ready = reader is not None and reader.status == "ready"
        active = self.active.get(key, {})
        plan = self.core.plan(
            pending=list(self.pending.get(key, {}).values()), running=list(self.running.get(key, {}).values()),
            active=active.values(), now=now, ready=ready,
            conversations=reader.conversations if reader is not None else None, inflight=self.inflight,
            retry_due=lambda iid: self.pace.retry_due(iid, clock),
            can_run=key not in self.busy and self.sight.online(machine) and ready and not self.pace.paused_now(key, clock),
            blocked=Blocked(self.sight, key, reader),
            held=lambda: self.pace.held_now(active.values(), clock, self.sight.signature))
        for item in plan.expire:
            self.record.set(item, state="expired")
            log.info("[inbox] %s/%s: %s expired after %g s without approval", machine, agent, item.id, self.core.ttl)
        for item in plan.finish:
            self.record.set(item, state="done")
        if plan.look_again:
            self.sight.read_again(machine, agent)
        if plan.run is not None:
            self.busy.add(key)
            nursery.start_soon(self.run_item, plan.run, self.core.request_for(plan.run, self.turn(plan.run, reader)))

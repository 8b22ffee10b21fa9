"""The live channel's routes: `GET /api/events` (the stream) and `POST /api/events/<channel>/view`.

The stream only moves bytes: hello, the snapshot or the missed events, then what the feed queued for the
channel (at most `BATCH` events a write) and a `beat` event when nothing came for `HEARTBEAT` seconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from collie.lead.door.packing import accepts_gzip, packed_stream
from collie.lead.feed.core import BATCH, HEARTBEAT, HEARTBEAT_ACTIVE, PING, SEND_STALL, UNAUTHORIZED, hello, replay

if TYPE_CHECKING:
    from collie.lead.feed.events import Channel, Feed


def install_events(app, feed: Feed, *, owner_check) -> None:
    """`GET /api/events` and `POST /api/events/<channel>/view`. `owner_check()` says whether the
    request's credential (already checked by the API) may read everything (a device or the local one)."""
    from quart import Response, g, jsonify, request

    from collie.lead.routes.common import error  # the one error shape

    @app.get("/api/events")
    async def events():
        if not owner_check():
            return error(403, "forbidden", "the live channel is for paired phones and the local credential")
        try:
            view = _view_from(request.args)
            held = _held(request.args)
        except ValueError as exc:
            return error(400, "bad_request", str(exc))
        try:
            ch = feed.open(getattr(g, "device", None))
        except OverflowError as exc:
            return error(503, "busy", str(exc))
        last = request.headers.get("Last-Event-ID") or request.args.get("last_event_id")
        try:
            ch.items_since, ch.have = held
            await feed.set_view(ch, view)
        except BaseException:
            await feed.close(ch)
            raise
        missed = feed.log.since(last)
        body = _stream(feed, ch, missed)
        gz = accepts_gzip(request.headers.get("Accept-Encoding"))
        resp = Response(packed_stream(body) if gz else body, mimetype="text/event-stream")
        if gz:  # issue 39: one gzip stream, flushed after every write
            resp.headers["Content-Encoding"] = "gzip"
        resp.headers["Vary"] = "Accept-Encoding"
        resp.headers["Cache-Control"] = "no-store"
        resp.headers["X-Accel-Buffering"] = "no"
        resp.timeout = None
        resp.send_stall_seconds = SEND_STALL
        return resp

    @app.post("/api/events/<channel>/view")
    async def events_view(channel: str):
        ch = feed.channels.get(channel)
        if ch is None or ch.device != getattr(g, "device", None):
            return error(404, "not_found", "no such live channel (it may have closed: open /api/events again)")
        data = await request.get_json(force=True, silent=True)
        if not isinstance(data, dict):
            return error(400, "bad_request", "the body must be a JSON object")
        try:
            view = _view_from(data)
            since, _ = _held({"items_since": data.get("items_since")})
        except ValueError as exc:
            return error(400, "bad_request", str(exc))
        ch.items_since = since if view and view[2] else None
        visible = data.get("visible", True)
        if type(visible) is not bool:
            return error(400, "bad_request", "visible must be true or false (is the page on screen?)")
        ch.visible = visible
        active = data.get("active", False)
        if type(active) is not bool:
            return error(400, "bad_request", "active must be true or false (is the user using the page?)")
        ch.active = active
        await feed.set_view(ch, view)
        for ev in await feed.view_events(ch):
            ch.offer(ev)
        return jsonify({"ok": True, "view": data if view else None})


def _held(args) -> tuple[int | None, str | None]:
    """What the phone holds already (issue 39): `items_since`, the revision it holds the viewed conversation's
    items up to (a whole number), and `have`, the tag of the dashboard it read (up to 64 hex digits)."""
    since, have = args.get("items_since"), args.get("have")
    if isinstance(since, str) and since.isascii() and since.isdigit() and len(since) <= 18:
        since = int(since)
    if since is not None and (type(since) is not int or since < 0):
        raise ValueError("items_since must be a whole number: the revision the phone holds the items up to")
    if have is not None and (not isinstance(have, str) or not 1 <= len(have) <= 64
                             or any(c not in "0123456789abcdef" for c in have)):
        raise ValueError("have must be the dashboard's tag (hex digits), as its ETag gives it")
    return since, have


def _view_from(args) -> tuple | None:
    machine, agent, conv = args.get("machine"), args.get("agent"), args.get("conversation")
    if agent in (None, ""):
        return None
    for name, value in (("machine", machine or "local"), ("agent", agent), ("conversation", conv)):
        if value is None:
            continue
        if not isinstance(value, str) or not 1 <= len(value) <= 128 or "/" in value or not value.isprintable():
            raise ValueError(f"{name} must be 1-128 printable characters without '/'")
    return (machine or "local", agent, conv or None)


async def _stream(feed: Feed, ch: Channel, missed):
    """The body of one live channel: hello, snapshot or missed events, then changes and heartbeats."""
    try:
        yield hello(ch.id)
        if missed is None:
            yield await _snapshot(feed, ch)
        else:
            for ev in replay(missed, ch.conv_key):
                yield ev.encode()
            for ev in await feed.view_events(ch):
                yield ev.encode()
        wrote = trio.current_time()  # when the last bytes went: an idle channel's beat comes HEARTBEAT after
        while True:
            if ch.overflowed:
                while True:
                    try:
                        ch.receive.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                        break
                ch.overflowed = False
                yield await _snapshot(feed, ch)
            if ch.closed.is_set():
                break
            got = None
            with trio.move_on_after(HEARTBEAT_ACTIVE):  # looked at every 2 s; a beat written as `active` says
                try:
                    got = await ch.receive.receive()
                except (trio.EndOfChannel, trio.ClosedResourceError):
                    break
            if ch.closed.is_set():
                break
            if got is None:
                if ch.active or trio.current_time() - wrote >= HEARTBEAT:
                    wrote = trio.current_time()
                    yield PING
                continue
            wrote = trio.current_time()
            batch = [got.encode()]
            while len(batch) < BATCH:  # what queued up meanwhile goes in the same write
                try:
                    batch.append(ch.receive.receive_nowait().encode())
                except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                    break
            yield b"".join(batch)
        if ch.close_reason == "unauthorized":
            yield UNAUTHORIZED
    finally:
        await feed.close(ch)


async def _snapshot(feed: Feed, ch: Channel) -> bytes:
    seq_id = f"{feed.log.boot}-{feed.log.seq}"
    return await feed.snapshot_wire(ch, seq_id)

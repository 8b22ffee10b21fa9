"""Fixes for hangs of quart-trio 0.12 on hypercorn 0.18's trio worker (HTTP/1.1 keep-alive).

The first two have one cause. hypercorn finishes a request (`H11Protocol._maybe_recycle`: reuse the
connection, or close it) inside the app's last `send`, which runs in quart-trio's per-request
nursery — and quart-trio cancels that nursery as soon as the response is out or hypercorn reports
the stream closed (`http.disconnect`). Whatever the recycle still has to await is then cancelled:

1. **Idle timer never re-armed.** The recycle's `Updated(idle=True)` is cancelled, so an idle
   connection never closes and every shutdown waits the whole `graceful_timeout`.
2. **Stall after an early answer** (issue 8.10). When the app answers before hypercorn has read the
   whole request body (a 401 from the door, a 404), the recycle finds the client still sending
   (h11: ours `DONE`, theirs `SEND_BODY`). It closes the stream — `http.disconnect`, so quart-trio
   cancels its nursery — then asks the server to close the socket, and that close is cancelled at its
   first checkpoint. The socket stays open with the idle timer stopped; when the rest of the body
   arrives h11 reaches `DONE`/`DONE` and pauses for a `start_next_cycle` nobody will call. The
   client's next request on that connection is never answered; it waits for its own timeout.

3. **A closed connection holds its descriptor for the keep-alive time.** When the client closes an
   idle connection, hypercorn stops reading but its connection task waits for the keep-alive timer
   (75 s here) before closing the socket: a client opening and closing connections fast could hold
   thousands of descriptors (issue 9.7). Reading's end now stops the timer.

The fix for 1 and 2, as HTTP/1.1 requires of a server that answers early (RFC 9112 §9.3, §9.6): the recycle runs
shielded (with its own short deadline), and when the client is still sending, either the rest of the
body is read and dropped and the connection is kept (a body of known length up to `DRAIN_MAX_BYTES`),
or the response says `Connection: close` and the connection is closed after it (a larger or chunked
body, or a client waiting for `100 Continue`). A client that stops sending mid-body is closed by the
keep-alive timer, which runs while the body drains.

4. **A response in two writes.** hypercorn sends a response's head as soon as the app starts it and
   the body in a second `send` right after, so every answer costs two system calls, and on a busy
   machine the client, woken by the head, preempts the server before the body (bench/README.md:
   `socket.send` was the lead's largest wall cost). A head that declares its length is held until
   the body (or the end of the message) and goes in the same write; anything else sent on the
   connection first sends what is held. Streamed answers (no length) are not held.

5. **A peer that takes nothing holds its connection for good.** hypercorn writes under a shield with no
   bound, so a client that stops reading (or is gone, where the kernel has no `TCP_USER_TIMEOUT`) blocks
   that write, and whatever waits on it, forever: a phone's live channel stays open with its viewing
   count. Now a write the peer takes no `SEND_SLICE` of for `SEND_STALL_SECONDS` ends the connection at
   once (a reset: what it never took is dropped).

6. **An HTTP/2 stream the client takes nothing of buffers without bound.** hypercorn lets the app's
   write go on once the send task has popped less than half its buffer — and a stream whose window is
   shut pops nothing (`pop(0)`) each time the app writes, so a phone that keeps its connection but
   stops reading one stream (a frozen app) made the lead buffer that stream's output in memory for good,
   and the live channel never stalled. Now the app waits until the buffer itself is below the low mark.

7. **An HTTP/2 response the app ends early stays open.** When the app stops before the end of its body
   (the live channel ended by its bound, `collie.lead.door.http.BoundedSendConnection`), hypercorn forgets the
   stream but never resets it: the client waits on it for good. Now the stream is reset (RST_STREAM,
   CANCEL) and its unsent data dropped.

8. **An input answered 5xx.** h11 answers a transfer coding other than `chunked` (`xchunked`, `gzip`) or a
   repeated `Transfer-Encoding` with 501 (RFC 9112 §6.1's SHOULD); the lead promises no input is a 5xx, so
   every answer to a request h11 cannot read is a 4xx (400 there).

9. **The first HTTP/2 request is held to h2's default header list (64 KiB).** h2 takes the
   `MAX_HEADER_LIST_SIZE` the server advertises only once the client acknowledges its SETTINGS, and a
   browser's first request comes before that: a request of a big cookie jar ended the connection
   (`ENHANCE_YOUR_CALM`). The server's own bound (`collie.lead.door.http`) holds from the first byte.

10. **A body that comes after its answer over HTTP/2 ends the server.** When the app answers before the
   request's body is in (the door's 401 to a POST), hypercorn closes the stream, then looks it up for the
   body's DATA frame that follows: a KeyError, out of the connection's task into the server's nursery, and
   the lead stopped listening (a phone whose cookie a neighbour replaced did it, issue 42.10). Such DATA is
   dropped, its flow control credited; and one connection's error ends that connection only (`collie.lead.door.http`).

11. **A write whose task is cancelled while it waits for the socket is lost.** The protocol takes its
   bytes out of h2's (or h11's) buffer, then waits for the connection's send lock — and a task cancelled in
   that wait dropped them. When the client resets a stream (a browser leaving the page) its request task is
   cancelled; if another write held the lock just then, the lost bytes were a HEADERS block the HPACK
   encoder had counted, and the browser failed to decode every later answer on the connection
   (`ERR_HTTP2_COMPRESSION_ERROR`), or DATA its flow control had counted (`ERR_HTTP2_PROTOCOL_ERROR`). Now
   the bytes join the connection's unsent queue, in order, before the wait; whoever holds the lock writes
   the queue — so a cancelled writer's bytes go out with the write ahead of it or the next one. (Shielding
   the wait instead would send an evicted connection's answer that its cancellation must drop.)

`install()` puts them in place (before serving); `collie.lead.door.http` passes its own subclass of
`FixedTCPServer`. They replace private internals of the versions in `WRITTEN_FOR` (pyproject.toml pins
those series, `~=`), so `install()` refuses any other version with a message naming both, rather than
patching code it was not written for. `tests/live/test_http_server.py` fails without each of parts 1-4, and
`tests/system/test_connections.py` (a phone that stops reading, over HTTP/1.1 and HTTP/2) without parts 5-7,
`tests/live/test_door_jar.py` without parts 8-10, `tests/live/test_http_server.py` without part 11.
"""

from __future__ import annotations

import socket
import struct
from importlib.metadata import PackageNotFoundError, version

import h2.errors
import h2.events
import h2.exceptions
import h11
import priority
import trio
from hypercorn import protocol as hypercorn_protocol
from hypercorn.events import Closed, RawData, Updated
from hypercorn.protocol import h2 as hypercorn_h2
from hypercorn.protocol.events import Body, EndBody, Response, StreamClosed
from hypercorn.protocol.h2 import BUFFER_LOW_WATER, H2Protocol, StreamBuffer
from hypercorn.protocol.h11 import STREAM_ID, H11Protocol
from hypercorn.trio import run as hypercorn_run
from hypercorn.trio.tcp_server import TCPServer

WRITTEN_FOR = {"hypercorn": "0.18", "quart-trio": "0.12"}  # the release series the fixes were written for
DRAIN_MAX_BYTES = 256 * 1024  # the API's own body limit (collie.lead.routes.api.MAX_BODY): larger bodies close instead
RECYCLE_SECONDS = 5.0  # bound on the shielded recycle: it sends at most a few bytes and starts a timer
# Fix 5: a write that gets no slice into the socket for this long ends the connection — nginx's `send_timeout`
# rule and default. 64 KiB a minute is ~1 kB/s: a peer that slow has stopped reading. (On Linux the lead's
# TCP_USER_TIMEOUT, collie.lead.door.http, usually ends such a connection first, after 30 s.)
SEND_STALL_SECONDS = 60.0
SEND_SLICE = 64 * 1024


def socket_of(stream):
    """The trio socket under a connection's stream (TLS or not)."""
    return getattr(stream, "transport_stream", stream).socket


async def send_bounded(stream, data: bytes) -> bool:
    """Send `data`; False when the peer took no `SEND_SLICE` of it for `SEND_STALL_SECONDS` (the stream
    is then in an unknown state and must be closed)."""
    view = memoryview(data)
    for start in range(0, len(view), SEND_SLICE):
        with trio.move_on_after(SEND_STALL_SECONDS):
            await stream.send_all(view[start:start + SEND_SLICE])
            continue
        return False
    return True


class _Discard:
    """Stands in for a finished request's stream while the rest of its body is read and dropped."""

    idle = False

    def __init__(self, protocol: FixedH11Protocol) -> None:
        self.protocol = protocol

    async def handle(self, event) -> None:
        if isinstance(event, EndBody):  # the whole body is in: the connection can serve the next request
            await self.protocol._maybe_recycle()
        # Body: dropped; StreamClosed: nothing to close


class FixedH11Protocol(H11Protocol):
    _declared_length: int | None = None
    _held: bytes = b""  # a response head waiting to go out with its body (fix 4)

    async def _send_h11_event(self, event) -> None:
        if isinstance(event, h11.Response) and any(name == b"content-length" for name, _ in event.headers):
            try:
                data = self.connection.send(event)
            except h11.LocalProtocolError:
                if self.connection.their_state != h11.ERROR:
                    raise
                return
            self._held += data or b""
            return
        if self._held:
            held, self._held = self._held, b""
            try:
                data = self.connection.send(event)
            except h11.LocalProtocolError:
                await self.send(RawData(data=held))
                if self.connection.their_state != h11.ERROR:
                    raise
                return
            await self.send(RawData(data=held + (data or b"")))
            return
        await super()._send_h11_event(event)

    async def _send_error_response(self, status_code: int) -> None:
        """h11's answer to a request it cannot parse, never a 5xx (fix 8): a transfer coding it does not know
        is 501 in h11, and no input is a 5xx at the lead (phone-api.md)."""
        await super()._send_error_response(400 if status_code >= 500 else status_code)

    async def _flush_held(self) -> None:
        if self._held:
            held, self._held = self._held, b""
            await self.send(RawData(data=held))

    async def _create_stream(self, request: h11.Request) -> None:
        self._declared_length = None
        for name, value in request.headers:  # h11 lower-cases names and rejects conflicting lengths
            if name == b"content-length":
                self._declared_length = int(value)
        await super()._create_stream(request)

    def _can_drain(self) -> bool:
        return (not self.connection.they_are_waiting_for_100_continue and self._declared_length is not None
                and self._declared_length <= DRAIN_MAX_BYTES)

    async def stream_send(self, event) -> None:
        if self._held and not isinstance(event, (Body, EndBody)):
            await self._flush_held()
        if (isinstance(event, Response) and event.status_code >= 200 and isinstance(self.connection, h11.Connection)
                and self.connection.their_state is h11.SEND_BODY and not self._can_drain()):
            event = Response(stream_id=event.stream_id, status_code=event.status_code,
                             headers=[*event.headers, (b"connection", b"close")])
        await super().stream_send(event)

    async def _maybe_recycle(self) -> None:
        with trio.CancelScope(shield=True, deadline=trio.current_time() + RECYCLE_SECONDS):
            conn = self.connection
            if (isinstance(conn, h11.Connection) and conn.our_state is h11.DONE and conn.their_state is h11.SEND_BODY
                    and not self.context.terminated.is_set()):
                # `_handle_events` feeds the rest of the body to the stand-in; it is in place before the
                # first await, so a body end read meanwhile (by the reading task) recycles through it.
                finished, drain = self.stream, _Discard(self)
                self.stream = drain
                if finished is not None:
                    await finished.handle(StreamClosed(stream_id=STREAM_ID))
                if self.stream is drain:  # still draining: the keep-alive timer bounds a client that stops
                    await self.send(Updated(idle=True))
            else:
                await super()._maybe_recycle()


class FixedStreamBuffer(StreamBuffer):
    async def pop(self, max_length: int) -> bytes:
        length = min(len(self.buffer), max_length)
        data = bytes(self.buffer[:length])
        del self.buffer[:length]
        if len(self.buffer) < BUFFER_LOW_WATER:  # what is left, not what was taken (fix 6)
            await self._paused.set()
        if len(self.buffer) == 0:
            await self._is_empty.set()
        return data


class FixedH2Protocol(H2Protocol):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # h2 applies the header list size it advertises only once the client acknowledges the SETTINGS, but
        # a browser sends its first request before that: the lead's own bound from the first byte (fix 9)
        self.connection.decoder.max_header_list_size = self.config.h2_max_header_list_size

    async def _create_stream(self, request) -> None:
        await super()._create_stream(request)
        self._count_streams()

    async def _handle_events(self, events) -> None:
        """A body (DATA) for a stream the app already answered and closed is dropped, its flow control
        credited (fix 10); hypercorn looked the stream up and raised KeyError, ending the server."""
        for event in events:
            if isinstance(event, h2.events.DataReceived) and event.stream_id not in self.streams:
                try:
                    self.connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                except h2.exceptions.ProtocolError:
                    pass  # the stream is gone for h2 too: the connection's window was credited already
                continue
            await super()._handle_events([event])

    async def _close_stream(self, stream_id: int) -> None:
        await super()._close_stream(stream_id)
        self._count_streams()

    def _count_streams(self) -> None:
        """Tell the connection's server how many streams are open (collie.lead.door.http counts them in its budget)."""
        changed = getattr(getattr(self.send, "__self__", None), "streams_changed", None)
        if changed is not None:
            changed(len(self.streams))

    async def stream_send(self, event) -> None:
        buffer = self.stream_buffers.get(event.stream_id) if isinstance(event, StreamClosed) else None
        if buffer is not None and not buffer._complete:  # the app ended before its body did (fix 7)
            try:
                self.connection.reset_stream(event.stream_id, h2.errors.ErrorCodes.CANCEL)
            except h2.exceptions.ProtocolError:
                pass  # closed meanwhile
            await buffer.close()  # its unsent data dropped; the send task forgets the stream (StreamClosedError)
            try:
                self.priority.unblock(event.stream_id)
            except priority.MissingStreamError:
                pass
            await self.has_data.set()
            await self._flush()
        await super().stream_send(event)


class FixedTCPServer(TCPServer):
    """Shields the connection-level events a cancelled request task could otherwise lose, and lets a
    connection end when its client closed it (fix 3)."""

    async def _read_data(self) -> None:
        await super()._read_data()
        await self.idle_task.stop()  # the client is gone: nothing is left for the keep-alive timer to end

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.unsent = bytearray()  # bytes the protocol gave to be written, in its order, not yet written (fix 11)

    async def protocol_send(self, event) -> None:
        if isinstance(event, RawData):  # hypercorn's write, bounded (fix 5), never lost nor reordered (fix 11)
            self.unsent += event.data  # before any wait: a task cancelled below leaves them to the next write
            async with self.send_lock:
                with trio.CancelScope(shield=True):  # as hypercorn's: a write is never left half done
                    try:
                        while self.unsent:  # its own bytes, and those of a writer cancelled while it waited
                            data, self.unsent = bytes(self.unsent), bytearray()
                            if not await send_bounded(self.stream, data):
                                await self._abort()
                                break
                        else:
                            return
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
            await self.protocol.handle(Closed())
        elif isinstance(event, Closed) or (isinstance(event, Updated) and event.idle):
            with trio.CancelScope(shield=True, deadline=trio.current_time() + RECYCLE_SECONDS):
                await super().protocol_send(event)
        else:
            await super().protocol_send(event)

    async def _abort(self) -> None:
        """Close at once with a reset, dropping what the stalled peer never took. The TCP socket under TLS
        too: a TLS close would first try to send its close_notify to that same peer."""
        sock = socket_of(self.stream)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        await getattr(self.stream, "transport_stream", self.stream).aclose()


class UnknownVersion(RuntimeError):
    """hypercorn or quart-trio is of a release these fixes were not written for."""


def check_versions(installed=version) -> None:
    """Raise UnknownVersion unless each package of WRITTEN_FOR is of its release series."""
    wrong = []
    for name, series in WRITTEN_FOR.items():
        try:
            got = installed(name)
        except PackageNotFoundError:
            got = "not installed"
        if got.split(".")[:2] != series.split("."):
            wrong.append(f"{name} {got} (written for {series}.x)")
    if wrong:
        raise UnknownVersion(f"collie.lead.door.hypercorn_fix patches private internals of hypercorn {WRITTEN_FOR['hypercorn']} "
                             f"and quart-trio {WRITTEN_FOR['quart-trio']}, not {', '.join(wrong)}: install the "
                             f"versions of constraints.txt (pip install -c constraints.txt -e .)")


def install(server: type[TCPServer] = FixedTCPServer) -> None:
    """Serve every hypercorn connection of this process with `server` (a `FixedTCPServer`) and the fixed
    protocol; UnknownVersion, before anything is patched, on a hypercorn or quart-trio it does not know."""
    check_versions()
    hypercorn_protocol.H11Protocol = FixedH11Protocol
    hypercorn_protocol.H2Protocol = FixedH2Protocol
    hypercorn_h2.StreamBuffer = FixedStreamBuffer
    hypercorn_run.TCPServer = server

"""JSON-RPC 2.0 over a byte stream pair, on trio (the ACP client's end of an agent's stdio).

`Endpoint.serve()` reads until the peer closes; each incoming request runs in its own task and is
answered exactly once (an error object when the handler raises); notifications run in the order they
came, one at a time, in the reading task (their handler must not block); a response resolves the `request()`
that waits for it. At most `REQUESTS_MAX` of the peer's requests are handled at once: one more is
answered an error at once, in the reading task, as is a malformed request — so a peer that floods
requests and reads no answers stops being read, and costs no more tasks or memory. What the peer
sends wrong is logged (escaped, one line each) and survived: noise on stdout, malformed JSON-RPC, a
line beyond the cap, a response to nothing. When the stream ends, every
waiting `request()` raises `Closed`. Writes are serialised by one lock; one message is at most
`max_line` bytes either way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from collie.crew.acp import framing
from collie.crew.acp.framing import Malformed, Message, Noise, TooLong, escape

Handler = Callable[[str, Any, bool], Awaitable[Any]]
READ_CHUNK = 65536
REQUESTS_MAX = 64  # the agent's requests being handled at once; more are refused (issue 42: bounded answers)


class RpcError(Exception):
    """An error answer (ours to send, or the peer's to us)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


class Closed(Exception):
    """The peer went away before answering."""


@attrs.define
class Stats:
    received: int = 0
    sent: int = 0
    noise: int = 0
    malformed: int = 0
    too_long: int = 0
    stray_responses: int = 0
    over_limit: int = 0


@attrs.frozen
class _Refuse:
    id: Any
    code: int
    message: str


class _Pending:
    def __init__(self) -> None:
        self.event = trio.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class Endpoint:
    def __init__(self, send_stream: trio.abc.SendStream, receive_stream: trio.abc.ReceiveStream, handler: Handler,
                 *, log: Callable[[str], None], max_line: int = framing.MAX_LINE) -> None:
        self._send, self._receive, self._handler, self._log = send_stream, receive_stream, handler, log
        self.max_line = max_line
        self._lock = trio.Lock()
        self._next_id = 0
        self._pending: dict[int, _Pending] = {}
        self.closed = False
        self.stats = Stats()
        self._in_flight = 0  # the agent's requests being handled now

    # --- sending -----------------------------------------------------------------------------
    async def _write(self, body: dict) -> None:
        data = framing.encode(body)
        if len(data) > self.max_line:
            raise RpcError(framing.INTERNAL_ERROR, f"message of {len(data)} bytes is over the {self.max_line} cap")
        if self.closed:
            raise Closed("the agent's stdin is closed")
        async with self._lock:
            try:
                await self._send.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise Closed("the agent's stdin is closed") from exc
        self.stats.sent += 1

    async def request(self, method: str, params: Any) -> Any:
        """Send a request and wait for its answer; raises RpcError (the peer's error) or Closed."""
        req_id = self._next_id
        self._next_id += 1
        pending = self._pending[req_id] = _Pending()
        try:
            await self._write(framing.request(req_id, method, params))
            await pending.event.wait()
        finally:
            self._pending.pop(req_id, None)
        if pending.error is not None:
            raise pending.error
        return pending.result

    async def notify(self, method: str, params: Any) -> None:
        await self._write(framing.notification(method, params))

    # --- receiving ---------------------------------------------------------------------------
    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        decoder = framing.Decoder(self.max_line)
        try:
            async with trio.open_nursery() as nursery:
                task_status.started()
                while True:
                    try:
                        data = await self._receive.receive_some(READ_CHUNK)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        data = b""
                    events = decoder.feed(data) if data else decoder.finish()
                    for event in events:
                        note = self._on_event(event, nursery)
                        if isinstance(note, _Refuse):  # answered here: a flood waits on its own answers
                            await self._answer_error(note.id, note.code, note.message)
                        elif note is not None:  # notifications in order: chunks must not overtake each other
                            await self._run_notification(note)
                    if not data:
                        break
        finally:
            self._close()

    def _close(self) -> None:
        self.closed = True
        for pending in list(self._pending.values()):
            pending.error = Closed("the agent closed its stdout before answering")
            pending.event.set()

    def _on_event(self, event: framing.Event, nursery: trio.Nursery) -> dict | _Refuse | None:
        """Route one event; returns a notification for the caller to run in order, or a request to
        refuse at once."""
        if isinstance(event, Noise):
            self.stats.noise += 1
            self._log(f"ignored a line on the agent's stdout that is not JSON-RPC: {escape(event.text)}")
            return
        if isinstance(event, TooLong):
            self.stats.too_long += 1
            self._log(f"dropped a message of {event.size} bytes from the agent (the cap is {self.max_line})")
            return
        if isinstance(event, Malformed):
            self.stats.malformed += 1
            self._log(f"malformed JSON-RPC from the agent: {event.reason}")
            if event.id is not None:
                return _Refuse(event.id, framing.INVALID_REQUEST, event.reason)
            return
        assert isinstance(event, Message)
        self.stats.received += 1
        body = event.body
        kind = framing.classify(body)
        if kind == "response":
            pending = self._pending.get(body["id"]) if isinstance(body["id"], int) else None
            if pending is None or pending.event.is_set():
                self.stats.stray_responses += 1
                self._log(f"a response to no request of ours (id {escape(str(body['id']), 40)}) was ignored")
                return
            if "error" in body:
                err = body["error"]
                code = err.get("code") if isinstance(err.get("code"), int) else framing.INTERNAL_ERROR
                msg = err.get("message") if isinstance(err.get("message"), str) else "error"
                pending.error = RpcError(code, msg, err.get("data"))
            else:
                pending.result = body["result"]
            pending.event.set()
        elif kind == "request":
            if self._in_flight >= REQUESTS_MAX:
                self.stats.over_limit += 1
                if self.stats.over_limit == 1 or self.stats.over_limit % 1000 == 0:
                    self._log(f"the agent has {REQUESTS_MAX} requests open: further ones are refused "
                              f"({self.stats.over_limit} so far)")
                return _Refuse(body["id"], framing.INTERNAL_ERROR,
                               f"at most {REQUESTS_MAX} requests at once; wait for an answer first")
            self._in_flight += 1
            nursery.start_soon(self._run_request, body)
        else:
            return body
        return None

    async def _answer_error(self, req_id: Any, code: int, message: str) -> None:
        try:
            await self._write(framing.error(req_id, code, message))
        except (Closed, RpcError):
            pass
        except Exception as exc:  # nothing the agent sent may end the adapter (issue 42 item 2)
            self._log(f"answering request {escape(repr(req_id), 60)} failed: {type(exc).__name__}: {escape(str(exc))}")

    async def _run_request(self, body: dict) -> None:
        try:
            await self._answer_request(body)
        finally:
            self._in_flight -= 1

    async def _answer_request(self, body: dict) -> None:
        try:
            value = await self._handler(body["method"], body.get("params"), False)
            answer = framing.result(body["id"], value)
        except RpcError as exc:
            answer = framing.error(body["id"], exc.code, exc.message, exc.data)
        except Exception as exc:  # our bug answers the agent and is logged; it does not end the adapter
            self._log(f"handling {escape(body['method'], 60)} failed: {type(exc).__name__}: {escape(str(exc))}")
            answer = framing.error(body["id"], framing.INTERNAL_ERROR, "the client failed to handle this request")
        try:
            await self._write(answer)
        except RpcError as exc:
            await self._answer_error(body["id"], framing.INTERNAL_ERROR, exc.message)
        except Closed:
            pass
        except Exception as exc:  # an answer that cannot be written is logged: the adapter goes on (issue 42 item 2)
            self._log(f"answering {escape(body['method'], 60)} failed: {type(exc).__name__}: {escape(str(exc))}")
            await self._answer_error(body["id"], framing.INTERNAL_ERROR, "the client could not write its answer")

    async def _run_notification(self, body: dict) -> None:
        try:
            await self._handler(body["method"], body.get("params"), True)
        except RpcError as exc:
            self._log(f"notification {escape(body['method'], 60)} refused: {escape(exc.message)}")
        except Exception as exc:
            self._log(f"handling {escape(body['method'], 60)} failed: {type(exc).__name__}: {escape(str(exc))}")

"""Newline-delimited JSON-RPC 2.0 framing for ACP, with no I/O (docs/acp.md "Why our own framing").

`Decoder.feed(bytes)` returns events: `Message(dict)` for every well-formed JSON-RPC 2.0 object,
`Noise(text)` for a line that is not JSON (an agent printing to stdout), `Malformed(reason)` for JSON
that is not JSON-RPC 2.0, `TooLong(size)` for a line beyond the cap (its bytes are dropped as they come,
so a runaway peer costs at most `max_line` bytes of memory). The caller logs and goes on: nothing here
raises on what the peer sends. `classify()` tells a request, a notification and a response apart.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

MAX_LINE = 8 * 1024 * 1024  # one ACP message; a file read or a long reply fits, a runaway stream does not


@attrs.frozen
class Message:
    body: dict


@attrs.frozen
class Noise:
    text: str


@attrs.frozen
class Malformed:
    reason: str
    id: Any = None  # the request id, when one could be read: the caller answers it with an error


@attrs.frozen
class TooLong:
    size: int


Event = Message | Noise | Malformed | TooLong


def escape(text: str | bytes, limit: int = 200) -> str:
    """A peer's text made safe for one log line: control characters and non-ASCII escaped, cut at `limit`."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    cut = text[:limit]
    out = cut.encode("ascii", "backslashreplace").decode("ascii")
    out = "".join(c if 32 <= ord(c) < 127 else f"\\x{ord(c):02x}" for c in out)
    return out + ("…" if len(text) > limit else "")


class Decoder:
    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.max_line = max_line
        self._buf = bytearray()
        self._dropping = 0  # > 0 while the rest of a too-long line is being skipped

    def feed(self, data: bytes) -> list[Event]:
        events: list[Event] = []
        start = 0
        while True:
            nl = data.find(b"\n", start)
            chunk = data[start:] if nl < 0 else data[start:nl]
            if self._dropping:
                self._dropping += len(chunk)
                if nl >= 0:
                    events.append(TooLong(self._dropping))
                    self._dropping = 0
            elif len(self._buf) + len(chunk) > self.max_line:
                self._dropping = len(self._buf) + len(chunk)
                self._buf.clear()
                if nl >= 0:
                    events.append(TooLong(self._dropping))
                    self._dropping = 0
            else:
                self._buf += chunk
                if nl >= 0:
                    line = bytes(self._buf)
                    self._buf.clear()
                    event = parse_line(line)
                    if event is not None:
                        events.append(event)
            if nl < 0:
                return events
            start = nl + 1

    def finish(self) -> list[Event]:
        """End of stream: a last line without a newline still counts."""
        if self._dropping:
            size, self._dropping = self._dropping, 0
            return [TooLong(size)]
        line = bytes(self._buf)
        self._buf.clear()
        event = parse_line(line)
        return [event] if event is not None else []


def parse_line(line: bytes) -> Event | None:
    stripped = line.strip()
    if not stripped:
        return None
    try:
        body = json.loads(stripped)
    except (ValueError, RecursionError):
        if stripped[:1] in (b"{", b"["):
            return Malformed("not valid JSON")
        return Noise(stripped.decode("utf-8", "replace"))
    if not isinstance(body, dict):
        return Malformed("a JSON-RPC message must be an object (batches are not used by ACP)")
    req_id = body.get("id")
    if body.get("jsonrpc") != "2.0":
        return Malformed('"jsonrpc" is not "2.0"', req_id if "method" in body else None)
    kind = classify(body)
    if kind is None:
        return Malformed("neither a request, a notification nor a response", req_id if "method" in body else None)
    return Message(body)


def classify(body: dict) -> str | None:
    """`request`, `notification`, `response`, or None for an object that is none of them."""
    has_id = "id" in body
    if has_id and not (body["id"] is None or isinstance(body["id"], (str, int)) and not isinstance(body["id"], bool)):
        return None
    if "method" in body:
        if not isinstance(body["method"], str):
            return None
        if "params" in body and not isinstance(body["params"], (dict, list, type(None))):
            return None
        return "request" if has_id else "notification"
    if has_id and (("result" in body) != ("error" in body)):
        if "error" in body and not isinstance(body["error"], dict):
            return None
        return "response"
    return None


def encode(body: dict) -> bytes:
    """One line of JSON. Never raises on text the peer sent us and we echo (issue 42 item 2): JSON
    may carry a lone surrogate (`"\\ud800"` as an id or in a method name), which has no UTF-8 form;
    such a message is written with every non-ASCII character escaped, so the peer gets back exactly
    the string it sent."""
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode() + b"\n"
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"


def request(req_id: int, method: str, params: Any) -> dict:
    return {"jsonrpc": "2.0", "id": req_id, "method": method, "params": params}


def notification(method: str, params: Any) -> dict:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def result(req_id: Any, value: Any) -> dict:
    return {"jsonrpc": "2.0", "id": req_id, "result": value}


def error(req_id: Any, code: int, message: str, data: Any = None) -> dict:
    err: dict = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": req_id, "error": err}


PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603

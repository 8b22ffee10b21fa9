"""The private control socket between the `collie` command and the running bridge.

The bridge listens on ``<state>/bridge.sock`` (the state folder is 0700, the socket 0600, and the
bridge checks the caller's uid). One request per connection: the client writes one JSON line
``{"op": ...}`` and reads one JSON line back: ``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``.

Ops: ``ping`` (pid, version, role, address, started), ``agents`` (each agent's status),
``restart``. The CLI side is synchronous and always bounded by a timeout.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

from collie.crew.errors import CollieError, NotRunningError

MAX_LINE = 4 * 1024 * 1024


def encode(msg: dict) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> dict:
    msg = json.loads(line)
    if not isinstance(msg, dict):
        raise ValueError("a control message is a JSON object")
    return msg


def call(sock_path: Path, op: str, *, timeout: float = 3.0, **args) -> dict:
    """Ask the running bridge; `NotRunningError` when nobody answers within `timeout` seconds."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        try:
            s.connect(str(sock_path))
        except (FileNotFoundError, ConnectionRefusedError):
            raise NotRunningError("no bridge is running (start it with `collie serve`)") from None
        s.sendall(encode({"op": op, **args}))
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
            if len(buf) > MAX_LINE:
                raise CollieError("the bridge sent an oversized control answer")
    except socket.timeout:
        raise NotRunningError(f"the bridge did not answer within {timeout:g} s") from None
    except OSError as exc:
        raise NotRunningError(f"cannot reach the bridge: {exc.strerror or exc}") from None
    finally:
        s.close()
    if not buf:
        raise NotRunningError("the bridge closed the control connection without answering")
    reply = decode(buf)
    if not reply.get("ok"):
        raise CollieError(f"the bridge refused {op}: {reply.get('error', 'no reason given')}")
    return reply

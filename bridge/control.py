"""The bridge's side of the control socket (see `collie.crew.control` for the protocol).

Only the bridge's own user may talk to it: the socket lives in the 0700 state folder, is made 0600,
and every connection's peer uid (SO_PEERCRED) must equal ours.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from collie.crew import control, logs

log = logs.get("control")

Handler = Callable[[dict], Awaitable[dict]]
READ_TIMEOUT = 5.0


def peer_uid(sock: trio.socket.SocketType) -> int | None:
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", raw)
    return uid


async def _answer(stream: trio.SocketStream, handlers: dict[str, Handler]) -> None:
    async with stream:
        uid = peer_uid(stream.socket)
        if uid is not None and uid != os.getuid():
            log.warning("[bridge] control socket: refused a caller with uid %s", uid)
            return
        buf = b""
        with trio.move_on_after(READ_TIMEOUT):
            while not buf.endswith(b"\n") and len(buf) < control.MAX_LINE:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                buf += chunk
        try:
            req = control.decode(buf)
            handler = handlers.get(str(req.get("op")))
            if handler is None:
                reply = {"ok": False, "error": f"unknown op {req.get('op')!r}"}
            else:
                reply = {"ok": True, **await handler(req)}
        except (ValueError, json.JSONDecodeError):
            reply = {"ok": False, "error": "malformed request"}
        except LookupError as exc:  # an op's own refusal ("no paired phone named …")
            reply = {"ok": False, "error": str(exc.args[0]) if exc.args else "not found"}
        except Exception as exc:  # a failing op answers its caller; it never ends the bridge
            log.exception("[bridge] control op failed")
            reply = {"ok": False, "error": f"the bridge could not do that: {type(exc).__name__}"}
        try:
            await stream.send_all(control.encode(reply))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


async def serve_control(path: Path, handlers: dict[str, Handler], *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path.unlink(missing_ok=True)
    old = os.umask(0o177)
    try:
        await sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(16)
    listener = trio.SocketListener(sock)
    try:
        async with trio.open_nursery() as nursery:
            task_status.started()
            await trio.serve_listeners(lambda s: _answer(s, handlers), [listener], handler_nursery=nursery)
    finally:
        path.unlink(missing_ok=True)

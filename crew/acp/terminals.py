"""ACP `terminal/*` for `collie acp run --allow-terminal`: commands run in the agent's folder.

Off by default (the client capability `terminal` is then false and every `terminal/*` request is
refused). Output is kept up to the agent's `outputByteLimit` (at most 1 MiB), cut at the start.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

import trio
from acp import schema

from crew.acp import files, framing
from crew.acp.rpc import RpcError

OUTPUT_MAX = 1024 * 1024
TERMINALS_MAX = 16


class _Terminal:
    def __init__(self, proc: trio.Process, limit: int) -> None:
        self.proc, self.limit = proc, limit
        self.output = bytearray()
        self.truncated = False
        self.exited = trio.Event()


class Terminals:
    def __init__(self, cwd: str) -> None:
        self.cwd = cwd
        self.by_id: dict[str, _Terminal] = {}
        self._counter = 0
        self._nursery: trio.Nursery | None = None

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            for term in self.by_id.values():
                if term.proc.returncode is None:
                    term.proc.kill()

    async def handle(self, method: str, params: Any) -> Any:
        if method == "terminal/create":
            req = schema.CreateTerminalRequest.model_validate(params)
            if len(self.by_id) >= TERMINALS_MAX:
                raise RpcError(framing.INTERNAL_ERROR, f"at most {TERMINALS_MAX} terminals at once")
            try:
                cwd = str(files.confine(self.cwd, req.cwd)) if req.cwd else self.cwd
            except files.Refused as exc:
                raise RpcError(framing.INVALID_PARAMS, str(exc)) from None
            env = dict(os.environ, **{e.name: e.value for e in (req.env or [])})
            proc = await trio.lowlevel.open_process([req.command, *(req.args or [])], cwd=cwd, env=env,
                                                    stdin=subprocess.DEVNULL,
                                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            self._counter += 1
            tid = f"t{self._counter}"
            term = self.by_id[tid] = _Terminal(proc, min(req.output_byte_limit or OUTPUT_MAX, OUTPUT_MAX))
            self._nursery.start_soon(self._pump, term)
            return {"terminalId": tid}
        req_id = params.get("terminalId") if isinstance(params, dict) else None
        term = self.by_id.get(req_id) if isinstance(req_id, str) else None
        if term is None:
            raise RpcError(framing.INVALID_PARAMS, "unknown terminal")
        if method == "terminal/output":
            return {"output": term.output.decode("utf-8", "replace"), "truncated": term.truncated,
                    **({"exitStatus": _status(term)} if term.exited.is_set() else {})}
        if method == "terminal/wait_for_exit":
            await term.exited.wait()
            return _status(term)
        if method == "terminal/kill":
            if term.proc.returncode is None:
                term.proc.kill()
            return {}
        if method == "terminal/release":
            if term.proc.returncode is None:
                term.proc.kill()
            del self.by_id[req_id]
            return {}
        raise RpcError(framing.METHOD_NOT_FOUND, f"the client does not offer {method[:60]}")

    async def _pump(self, term: _Terminal) -> None:
        async with term.proc.stdout:
            while data := await term.proc.stdout.receive_some(65536):
                term.output += data
                if len(term.output) > term.limit:
                    del term.output[:len(term.output) - term.limit]
                    term.truncated = True
        await term.proc.wait()
        term.exited.set()


def _status(term: _Terminal) -> dict:
    code = term.proc.returncode
    if code is not None and code < 0:
        return {"exitCode": None, "signal": str(-code)}
    return {"exitCode": code, "signal": None}

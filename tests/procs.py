"""Programs a test starts: waited for by what they print, with one generous outer limit, and always ended.

A loaded machine (two cores, eight test runs at once) makes a program slow to start and slow to end;
a fixed 10–20 s deadline then fails a test whose behaviour is right. So a test waits for readiness (a
line, a socket answering) or for the program's end with `LIMIT` as the outer bound, which only a hung
program reaches. Whatever happens — an assertion, a time-out, Ctrl-C — `running` ends the program and
closes its pipes, so nothing of a run is left running after it (tests/conftest.py checks that at the
end of the session).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path

from collie.crew.acp.reaper import processes

LIMIT = 120.0  # seconds: only a program that hangs reaches it, however busy the machine is


def stop(proc: subprocess.Popen) -> None:
    """End `proc` now (SIGKILL; its whole process group when it leads one) and close its pipes."""
    if proc.poll() is None:
        try:
            if os.getpgid(proc.pid) == proc.pid:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except ProcessLookupError:
            pass
        proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def terminate(proc: subprocess.Popen, limit: float = LIMIT) -> int:
    """SIGTERM, then `proc`'s exit status once it ended (SIGKILL after `limit` seconds); pipes closed."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            pass
    stop(proc)
    return proc.returncode


def ended(proc: subprocess.Popen, what: str = "the program", limit: float = LIMIT) -> tuple:
    """(stdout, stderr) once `proc` exited by itself; a program still running after `limit` seconds is
    ended and the test fails saying so."""
    try:
        return proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        stop(proc)
        raise AssertionError(f"{what} did not end within {limit:g} s") from None


def readline(proc: subprocess.Popen, what: str = "a line", limit: float = LIMIT) -> str:
    """The next line `proc` prints on stdout, waited for up to `limit` seconds, or "" when it exited
    first; a program that prints nothing within `limit` is ended and the test fails naming `what`."""
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(limit)
    if reader.is_alive():
        stop(proc)
        reader.join()
        raise AssertionError(f"{what}: nothing printed within {limit:g} s")
    return got[0]


@contextmanager
def running(argv: list[str], **kw):
    """`subprocess.Popen(argv, **kw)`, ended with its pipes closed when the block ends, however it ends."""
    proc = subprocess.Popen(argv, **kw)
    try:
        yield proc
    finally:
        stop(proc)


def marked(mark: str, prefix: bool = False) -> set[int]:
    """The live processes of this user whose environment holds `mark` (a test run's own variable), or with
    `prefix` a variable that starts with it."""
    found = set()
    needle = mark.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            hit = any(v.startswith(needle) for v in env) if prefix else needle in env
            if hit and _state(entry) not in ("Z", "X"):
                found.add(int(entry.name))
        except OSError:  # gone, or another user's
            continue
    return found


def descendants(root: int) -> set[int]:
    """Every live process below `root` (by parent pid), zombies left out."""
    parents: dict[int, list[int]] = {}
    for pid, state, ppid, _pgrp in processes():
        if state not in (b"Z", b"X"):
            parents.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    """`pid` runs (a zombie, exited but not yet waited for, does not)."""
    try:
        return _state(Path(f"/proc/{pid}")) not in ("Z", "X")
    except OSError:
        return False


def _state(entry: Path) -> str:
    return (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]


def command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"

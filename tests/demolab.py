"""Running `collie demo` the way a person does, for the demo's process-level tests.

`DemoRun` starts the demo with a throw-away HOME and reads what it prints, either through a pipe
(stdout not a terminal) or in a pseudo-terminal of its own (`tty=True`: the demo's session leader
with the pty as controlling terminal, so a written Ctrl-C is a real SIGINT and `p` is a key press).
Every wait has a deadline; `close` ends the demo and anything it left, whatever the test did.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

from tests.crewlab import REPO
from tests.procs import LIMIT, alive, descendants  # noqa: F401 (the demo tests take them from here)

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]|\r")


def listening(pids: set[int]) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state that one of `pids` holds (IPv4 and IPv6)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = []
    pid = next(iter(pids), None)
    for table, v6 in (("tcp", False), ("tcp6", True)):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if cols[3] != "0A" or cols[9] not in inodes:  # 0A: LISTEN
                continue
            hexaddr, hexport = cols[1].split(":")
            raw = bytes.fromhex(hexaddr)
            if v6:
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                import ipaddress

                addr = str(ipaddress.IPv6Address(raw))
            else:
                addr = ".".join(str(b) for b in raw[::-1])
            found.append((addr, int(hexport, 16)))
    return found


def home_env() -> tuple[Path, dict]:
    home = Path(tempfile.mkdtemp(prefix="demo-home-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COLLIE_", "XDG_"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / "xdg-config"), XDG_STATE_HOME=str(home / "xdg-state"),
               PYTHONPATH=str(REPO), TERM="xterm-256color", COLUMNS="160", LINES="60")
    return home, env


class DemoRun:
    def __init__(self, argv: list[str], env: dict, *, tty: bool, prefix: list[str] = (),
                 size: tuple[int, int] = (60, 160)) -> None:
        self.tty = tty
        self.raw = b""
        self.lock = threading.Lock()
        self.seen_pids: set[int] = set()
        command = [*prefix, sys.executable, "-m", "collie.crew.cli.main", "demo", *argv]
        if tty:
            master, slave = os.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", *size, 0, 0))  # rows, columns
            self.master = master
            self.proc = subprocess.Popen(command, cwd=REPO, env=env, stdin=slave, stdout=slave, stderr=slave,
                                         start_new_session=True,
                                         preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
            os.close(slave)
            read = self._read_pty
        else:
            self.master = None
            self.proc = subprocess.Popen(command, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            read = self._read_pipe
        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()

    def _read_pty(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: the demo and everything on its terminal are gone
                return
            if not chunk:
                return
            with self.lock:
                self.raw += chunk

    def _read_pipe(self) -> None:
        for chunk in iter(lambda: self.proc.stdout.read1(65536), b""):
            with self.lock:
                self.raw += chunk

    @property
    def text(self) -> str:
        with self.lock:
            raw = self.raw
        return ANSI.sub("", raw.decode(errors="replace"))

    def expect(self, pattern: str, timeout: float = 90.0, *, after: int = 0) -> re.Match:
        """The first match of `pattern` in what the demo printed from offset `after`, waiting up to `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            m = re.compile(pattern, re.M).search(self.text, after)
            if m:
                return m
            self.seen_pids |= descendants(self.proc.pid)
            if self.proc.poll() is not None:
                time.sleep(0.2)
                m = re.compile(pattern, re.M).search(self.text, after)
                if m:
                    return m
                raise AssertionError(f"the demo exited {self.proc.returncode} before {pattern!r}:\n{self.text[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} within {timeout:g} s:\n{self.text[-3000:]}")
            time.sleep(0.1)

    def press(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def pids(self) -> set[int]:
        self.seen_pids |= descendants(self.proc.pid)
        return {p for p in self.seen_pids if alive(p)}

    def interrupt(self) -> None:
        """Ctrl-C as a person presses it: on the terminal when there is one, else SIGINT to the demo."""
        if self.tty:
            self.press("\x03")
        else:
            self.proc.send_signal(signal.SIGINT)

    def close(self) -> None:
        """End the demo (Ctrl-C, then SIGKILL) and anything it started that is still alive."""
        started = self.pids()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(LIMIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for p in started:
            if alive(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.reader.join(timeout=5)
        if self.master is not None:
            os.close(self.master)
            self.master = None
        elif self.proc.stdout is not None:
            self.proc.stdout.close()

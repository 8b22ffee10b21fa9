"""Logging: one log per bridge under the state folder, 0600, never a token, never a forged line.

Every record's final text — message, arguments and traceback alike — passes through two filters:

- `printable` shows every control or invisible character as an escape (``\\n``, ``\\x1b``,
  ``\\u202e``), so a value a peer chose (an agent's runtime, a member's version, a frame's type) can
  neither start a new line that looks like ``[bridge] FATAL`` nor drive the terminal. A traceback
  keeps its line breaks, but every line of it is indented, so none can pass for a record.
- `Redactor` replaces each registered secret, whatever its length, with ``[redacted]`` — in its raw
  form and in the escaped forms an error message may quote it in. Secrets are registered as soon as
  they are read (sources.json tokens, the .env token, crew.json, API credentials).

The log is bounded: past `LOG_MAX` bytes `bridge.log` becomes `bridge.log.1` (the one before is
dropped) and a new `bridge.log` starts, 0600 like the first — so no peer, however many lines it causes,
can fill the state folder's disk (where the journals and the inbox live). `collie logs` reads both.

The CLI prints peer values through the same `printable`. Line prefixes are the product's:
``[bridge] …`` for the daemon, ``[durable] …`` for agent traffic.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import sys
import threading
from pathlib import Path

from collie.crew.fsutil import touch_private

REDACTED = "[redacted]"
LOG_MAX = 10 * 1024 * 1024  # bytes of bridge.log before it becomes bridge.log.1 (so at most twice this on disk)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: object) -> str:
    """`text` as one visible line: control, format and separator characters become escapes."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


class Redactor:
    def __init__(self) -> None:
        self._secrets: set[str] = set()
        self._lock = threading.Lock()

    def add(self, secret: str | None) -> None:
        """Redact `secret` from now on, however short, and the escaped forms an error may quote."""
        if not secret:
            return
        forms = {secret}
        for _ in range(2):  # quoted once (an error's repr), or twice (the repr of that error)
            forms |= {g for f in forms for g in (printable(f), repr(f)[1:-1], json.dumps(f)[1:-1])}
        with self._lock:
            self._secrets.update(f for f in forms if f)

    def clean(self, text: str) -> str:
        for secret in sorted(self._secrets, key=len, reverse=True):
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text


redactor = Redactor()


class _PrivateRotatingHandler(logging.handlers.RotatingFileHandler):
    """A size-capped log whose every new file is created 0600 (not by the process umask)."""

    def _open(self):
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        return open(fd, self.mode, encoding=self.encoding, errors=self.errors)


def rotated(path: Path) -> Path:
    """Where the previous part of the log at `path` is kept."""
    return path.with_name(path.name + ".1")


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        saved = record.msg, record.args
        record.msg, record.args = printable(redactor.clean(record.getMessage())), None
        try:
            return redactor.clean(super().format(record))
        finally:
            record.msg, record.args = saved

    def formatException(self, ei) -> str:  # noqa: N802 (logging's name)
        return _indent(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:  # noqa: N802
        return _indent(super().formatStack(stack_info))


def _indent(text: str) -> str:
    return "\n".join("    " + printable(line) for line in text.split("\n"))


def setup(log_path: Path | None, *, stderr: bool = True, level: int = logging.INFO) -> None:
    """Route the `collie` logger to the bridge log (0600) and optionally stderr."""
    logger = logging.getLogger("collie")
    logger.setLevel(level)
    logger.propagate = False
    for h in list(logger.handlers):
        logger.removeHandler(h)
        h.close()
    fmt = _Formatter("%(asctime)s %(message)s", datefmt="%Y-%m-%dT%H:%M:%S%z")
    if log_path is not None:
        touch_private(log_path)
        fh = _PrivateRotatingHandler(log_path, maxBytes=LOG_MAX, backupCount=1, encoding="utf-8")
        fh.setFormatter(fmt)
        logger.addHandler(fh)
    if stderr:
        sh = logging.StreamHandler(sys.stderr)
        sh.setFormatter(_Formatter("%(message)s"))
        logger.addHandler(sh)


def get(name: str = "") -> logging.Logger:
    return logging.getLogger("collie" + (f".{name}" if name else ""))

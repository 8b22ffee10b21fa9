"""Logging: one log per bridge under the state folder, 0600, never a token.

Every record's final text — message, arguments and traceback alike — passes through `Redactor`,
which replaces each registered secret with ``[redacted]``. Secrets are registered as soon as they are
read (sources.json tokens, the .env token, API credentials), before anything could log them.

Line prefixes are the product's: ``[bridge] …`` for the daemon, ``[durable] …`` for agent traffic.
"""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

from crew.fsutil import touch_private

REDACTED = "[redacted]"


class Redactor:
    def __init__(self) -> None:
        self._secrets: set[str] = set()
        self._lock = threading.Lock()

    def add(self, secret: str | None) -> None:
        if secret and len(secret) >= 8:
            with self._lock:
                self._secrets.add(secret)

    def clean(self, text: str) -> str:
        for secret in sorted(self._secrets, key=len, reverse=True):
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text


redactor = Redactor()


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redactor.clean(super().format(record))


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
        fh = logging.FileHandler(log_path, encoding="utf-8")
        fh.setFormatter(fmt)
        logger.addHandler(fh)
    if stderr:
        sh = logging.StreamHandler(sys.stderr)
        sh.setFormatter(_Formatter("%(message)s"))
        logger.addHandler(sh)


def get(name: str = "") -> logging.Logger:
    return logging.getLogger("collie" + (f".{name}" if name else ""))

"""The ACP client's file capabilities, confined to one folder (docs/acp.md "Files and terminals").

`confine(root, path)` resolves symlinks first (the path and the root), then refuses anything that is
not inside the root: `..`, an absolute path elsewhere, a symlink pointing out. A relative path is
refused too (ACP requires absolute paths). Reads are capped so that an answer fits in one message.
"""

from __future__ import annotations

import os
from pathlib import Path

READ_MAX = 4 * 1024 * 1024


class Refused(Exception):
    """The path is outside the folder, or the file cannot be served; the message says which."""


def confine(root: str | os.PathLike, path: str) -> Path:
    if not isinstance(path, str) or not path or "\x00" in path:
        raise Refused("the path is empty or not text")
    if not os.path.isabs(path):
        raise Refused(f"{path!r} is not an absolute path")
    real_root = Path(os.path.realpath(root))
    real = Path(os.path.realpath(path))
    if real != real_root and real_root not in real.parents:
        raise Refused(f"{path!r} is outside the agent's folder {str(real_root)!r}")
    return real


def read_text(root: str | os.PathLike, path: str, line: int | None = None, limit: int | None = None) -> str:
    """The file's text from 1-based `line`, at most `limit` lines (ACP `fs/read_text_file`)."""
    real = confine(root, path)
    try:
        with open(real, "rb") as fh:
            data = fh.read(READ_MAX + 1)
    except FileNotFoundError:
        raise Refused(f"{path!r} does not exist") from None
    except IsADirectoryError:
        raise Refused(f"{path!r} is a folder") from None
    except OSError as exc:
        raise Refused(f"{path!r} cannot be read: {exc.strerror}") from None
    if len(data) > READ_MAX:
        raise Refused(f"{path!r} is over {READ_MAX} bytes")
    text = data.decode("utf-8", "replace")
    if line is None and limit is None:
        return text
    lines = text.splitlines(keepends=True)
    start = max((line or 1) - 1, 0)
    end = start + limit if limit is not None else None
    return "".join(lines[start:end])


def write_text(root: str | os.PathLike, path: str, content: str) -> None:
    """Write `content` (ACP `fs/write_text_file`): temp file then rename, inside the folder only."""
    real = confine(root, path)
    if not real.parent.is_dir():
        raise Refused(f"the folder of {path!r} does not exist")
    tmp = real.with_name(f".{real.name}.collie-tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(content)
        os.replace(tmp, real)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise Refused(f"{path!r} cannot be written: {exc.strerror}") from None

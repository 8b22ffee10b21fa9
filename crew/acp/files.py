"""The ACP client's file capabilities, confined to one folder (docs/acp.md "Files and terminals").

A hostile agent names the paths, and may change the folder's contents while Collie reads or writes
(issue 25.3: resolving a path and then opening it by name left a window in which a folder could become a
symlink to elsewhere). So a path is never opened by name from `/`: it is walked one component at a
time from a descriptor of the folder (`--cwd`), each component opened relative to the one before with
`O_NOFOLLOW`, so nothing is followed that was not looked at. A symlink met on the way is read and its
target walked the same way — a relative one from where it is, an absolute one only when it names a
place inside the folder — and `..` never climbs above the folder. A component that changes between
the look and the open fails the open (`O_NOFOLLOW`, `O_DIRECTORY`): refused, never followed.

Refused, with a message the agent sees as the request's error: a relative path (ACP requires absolute
ones), a path outside the folder, a symlink leading out, anything but a regular file, a read over
`READ_MAX`, and a write to a file with more than one hard link (its other name may be outside the
folder). Reads and writes are plain functions of (folder, path), blocking: the adapter runs them off
its event loop, bounded in time (`collie.crew.acp.adapter`). Reads open with `O_NONBLOCK` and serve only a
regular file; writes go to a fresh temporary file made with exclusive create under a random name in
the same folder (never a name the agent could plant first: a hard link to a file outside, a FIFO) and
replace the target by rename, both relative to the walked folder's descriptor.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

READ_MAX = 4 * 1024 * 1024
MAX_HOPS = 40  # symlinks followed in one walk, as the kernel's own limit
_DIR = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """The path is outside the folder, or the file cannot be served; the message says which."""


def confine(root: str | os.PathLike, path: str) -> Path:
    """`path` resolved (symlinks followed) when it is inside `root`, else `Refused`. For a terminal's
    starting folder only (`collie.crew.acp.terminals`): a name, not an open file — files are read and written
    by the walk below."""
    if not isinstance(path, str) or not path or "\x00" in path:
        raise Refused("the path is empty or not text")
    if not os.path.isabs(path):
        raise Refused(f"{path!r} is not an absolute path")
    real_root = Path(os.path.realpath(root))
    real = Path(os.path.realpath(path))
    if real != real_root and real_root not in real.parents:
        raise Refused(f"{path!r} is outside the agent's folder {str(real_root)!r}")
    return real


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


class _Walk:
    """Descriptors of the folders from the root down to where the walk is; the root stays at the bottom."""

    def __init__(self, root: str | os.PathLike, path: str) -> None:
        if not isinstance(path, str) or not path or "\x00" in path:
            raise Refused("the path is empty or not text")
        if not os.path.isabs(path):
            raise Refused(f"{path!r} is not an absolute path")
        self.path = path
        self.real_root = os.path.realpath(root)
        self.given_root = os.path.abspath(root)
        try:
            self.stack = [os.open(self.real_root, _DIR)]
        except OSError as exc:
            raise Refused(f"the agent's folder {self.real_root!r} cannot be opened: {exc.strerror}") from None
        self.hops = 0

    def close(self) -> None:
        for fd in self.stack:
            os.close(fd)
        self.stack = []

    def outside(self) -> Refused:
        return Refused(f"{self.path!r} is outside the agent's folder {self.real_root!r}")

    def start(self) -> list[str]:
        """The components to walk from the root: the path must be written under the folder (as its real
        path or as --cwd was given); what follows is walked, `..` included."""
        for base in (self.real_root, self.given_root):
            if self.path == base or self.path.startswith(base.rstrip("/") + "/"):
                return _parts(self.path[len(base):])
        raise self.outside()

    def _symlink(self, name: str, todo: list[str]) -> list[str]:
        self.hops += 1
        if self.hops > MAX_HOPS:
            raise Refused(f"{self.path!r} goes through more than {MAX_HOPS} symlinks")
        target = os.readlink(name, dir_fd=self.stack[-1])
        if target.startswith("/"):
            rel = os.path.relpath(os.path.normpath(target), self.real_root)
            if rel.startswith("..") or rel == "..":
                raise self.outside()
            while len(self.stack) > 1:
                os.close(self.stack.pop())
            return _parts(rel) + todo
        return _parts(target) + todo

    def walk(self, *, follow_last: bool) -> str | None:
        """Walk to the last component; the stack's top is then its folder. Returns the last name (None
        when the path is the folder itself). With `follow_last`, a last component that is a symlink is
        followed (its target walked in turn)."""
        todo = self.start()
        while todo:
            name = todo.pop(0)
            if name == "..":
                if len(self.stack) == 1:
                    raise self.outside()
                os.close(self.stack.pop())
                continue
            try:
                st = os.stat(name, dir_fd=self.stack[-1], follow_symlinks=False)
            except FileNotFoundError:
                if todo:
                    raise Refused(f"a folder of {self.path!r} does not exist") from None
                return name
            if stat.S_ISLNK(st.st_mode):
                if todo or follow_last:
                    todo = self._symlink(name, todo)
                    continue
                return name
            if not todo:
                return name
            try:
                self.stack.append(os.open(name, _DIR, dir_fd=self.stack[-1]))
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    raise Refused(f"{self.path!r} is not a path of folders (or changed while it was read)") from None
                raise
        return None


def _open_walk(root, path: str, *, follow_last: bool) -> tuple[_Walk, str | None]:
    walk = _Walk(root, path)
    try:
        return walk, walk.walk(follow_last=follow_last)
    except Refused:
        walk.close()
        raise
    except OSError as exc:
        walk.close()
        raise Refused(f"{path!r} cannot be reached: {exc.strerror}") from None


def read_text(root: str | os.PathLike, path: str, line: int | None = None, limit: int | None = None) -> str:
    """The file's text from 1-based `line`, at most `limit` lines (ACP `fs/read_text_file`)."""
    walk, name = _open_walk(root, path, follow_last=True)
    try:
        if name is None:
            raise Refused(f"{path!r} is a folder")
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=walk.stack[-1])
        except FileNotFoundError:
            raise Refused(f"{path!r} does not exist") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Refused(f"{path!r} changed while it was read") from None
            raise Refused(f"{path!r} cannot be read: {exc.strerror}") from None
    finally:
        walk.close()
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Refused(f"{path!r} is a folder" if stat.S_ISDIR(st.st_mode) else f"{path!r} is not a regular file")
    with os.fdopen(fd, "rb") as fh:
        try:
            data = fh.read(READ_MAX + 1)
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
    """Write `content` (ACP `fs/write_text_file`) inside the folder only: into a fresh temporary file
    made with exclusive create under an unpredictable name, relative to the walked folder's
    descriptor, then renamed over the target. Nothing the agent planted is ever opened for writing:
    a name it put there first (a hard link to a file elsewhere, a FIFO) makes the create fail and a
    new name is drawn (issue 42 items 1 and 5)."""
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused(f"the content for {path!r} is not valid Unicode text (a lone surrogate): not written") from None
    walk, name = _open_walk(root, path, follow_last=True)
    try:
        if name is None:
            raise Refused(f"{path!r} is a folder")
        folder = walk.stack[-1]
        try:
            st = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None:
            if not stat.S_ISREG(st.st_mode):
                raise Refused(f"{path!r} is not a regular file")
            if st.st_nlink > 1:
                raise Refused(f"{path!r} has {st.st_nlink} hard links (another may be outside the agent's folder): "
                              "not written")
        fd, tmp = _fresh(folder, path, stat.S_IMODE(st.st_mode) if st is not None else 0o644)
        try:
            made = os.fstat(fd)
            if not stat.S_ISREG(made.st_mode) or made.st_nlink != 1:  # O_EXCL made it: cannot happen
                raise Refused(f"{path!r} cannot be written: the temporary file is not a new regular file")
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.close(fd)
            fd = -1
            os.rename(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException as exc:
            if fd >= 0:
                os.close(fd)
            try:
                os.unlink(tmp, dir_fd=folder)
            except OSError:
                pass
            if isinstance(exc, OSError):
                raise Refused(f"{path!r} cannot be written: {exc.strerror}") from None
            raise
    finally:
        walk.close()


TMP_TRIES = 8


def _fresh(folder: int, path: str, mode: int) -> tuple[int, str]:
    """A new regular file in `folder` under a name nobody could know beforehand (128 random bits),
    created exclusively (`O_EXCL`: an existing name of any kind, a planted link or FIFO included,
    is never opened); its descriptor and name."""
    for _ in range(TMP_TRIES):
        tmp = f".collie-write-{secrets.token_hex(16)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                           mode, dir_fd=folder), tmp
        except FileExistsError:
            continue
        except OSError as exc:
            raise Refused(f"{path!r} cannot be written: {exc.strerror}") from None
    raise Refused(f"{path!r} cannot be written: no fresh temporary name in {TMP_TRIES} tries")

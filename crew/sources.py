"""sources.json: the list of durable agents this machine attaches (features A1–A9).

The file is a JSON array of entries, each ``{"name", "kind": "durable", "socket"}`` or
``{"name", "kind": "durable", "url", "token"}``. Validation is strict on purpose: a silently
skipped agent would never show up (A4). Every problem becomes one `ConfigError` whose text names the
entry (1-based, with its name when it has one) and the field:

    sources.json entry 2 ("edge"): field "url": missing "token"

Reading refuses a symlinked file or one owned by another user; a file looser than 0600 is tightened
by the bridge at start (A6). Writing is atomic and always 0600 (A5), and `attach`/`detach` refuse to
rewrite a file they could not parse, so a typo never costs the other entries.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
import attrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError

from crew.convert import describe, strict_converter
from crew.errors import ConfigError
from crew.fsutil import atomic_write, ensure_private_dir

NAME_RULE = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
RESERVED_NAME = "default"  # the terminal session's / single-agent instance's name (A7)
FIELDS = ("name", "kind", "socket", "url", "token")


@attrs.frozen
class Source:
    """One attached durable agent. Exactly one of `socket` / `url` is set; `url` comes with `token`."""

    name: str
    kind: str
    socket: str | None = None
    url: str | None = None
    token: str | None = attrs.field(default=None, repr=False)

    @property
    def transport(self) -> str:
        return "socket" if self.socket else "url"

    @property
    def address(self) -> str:
        return self.socket or self.url or ""

    def to_json(self) -> dict:
        out: dict = {"name": self.name, "kind": self.kind}
        if self.socket:
            out["socket"] = self.socket
        else:
            out["url"] = self.url
            out["token"] = self.token
        return out


_conv = strict_converter()


def _fail(index: int, name: str | None, field: str | None, text: str) -> ConfigError:
    who = f'entry {index} ("{name}")' if name else f"entry {index}"
    where = f": field {json.dumps(field)}" if field else ""  # escaped: a field name may hold anything
    return ConfigError(f"sources.json {who}{where}: {text}")


def _entry(index: int, raw: object, *, reserved: bool = True) -> Source:
    if not isinstance(raw, dict):
        raise _fail(index, None, None, f"expected an object {{...}}, got {type(raw).__name__}")
    name = raw.get("name")
    name = name if isinstance(name, str) and NAME_RULE.match(name) else None  # only safe names are echoed
    extra = sorted(k for k in raw if k not in FIELDS)
    if extra:
        raise _fail(index, name, extra[0], f"unknown field (allowed: {', '.join(FIELDS)})")
    try:
        src = _conv.structure(raw, Source)
    except (ClassValidationError, ForbiddenExtraKeysError) as exc:
        path, msg = describe(exc)[0]
        field = path.removeprefix("$.") if path != "$" else None
        if msg == "required field missing":
            msg = "missing; every entry needs it"
        elif field == "token":
            msg = "must be a string"  # never echo what might be a secret
        raise _fail(index, name, field, msg) from None
    if src.kind != "durable":
        raise _fail(index, name, "kind", f'must be "durable", got {src.kind!r:.40}')
    if not NAME_RULE.match(src.name):
        raise _fail(
            index, None, "name",
            f"{src.name!r:.40} breaks the name rule: 1-32 of a-z, 0-9 and '-', starting with a letter or digit",
        )
    if reserved and src.name == RESERVED_NAME:
        raise _fail(index, name, "name", f'"{RESERVED_NAME}" is the main session\'s name; pick another name')
    if src.socket is not None and src.url is not None:
        raise _fail(index, name, "socket", 'both "socket" and "url" are set; keep one')
    if src.socket is None and src.url is None:
        raise _fail(index, name, "socket", 'neither "socket" nor "url" is set; give one')
    if src.socket is not None and src.token is not None:
        raise _fail(index, name, "token", 'a socket entry takes no "token" (the socket is private instead)')
    if src.url is not None and src.token is None:
        raise _fail(index, name, "url", 'missing "token"')
    return src


def parse_sources(text: str | bytes) -> list[Source]:
    """Parse and validate the whole file; the first problem raises `ConfigError`."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise ConfigError(f"sources.json is not valid JSON{where}: {getattr(exc, 'msg', exc)}") from None
    if not isinstance(data, list):
        raise ConfigError(f"sources.json must be a JSON array of entries [...], got {type(data).__name__}")
    out: list[Source] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(data, start=1):
        src = _entry(index, raw)
        if src.name in seen:
            raise _fail(index, src.name, "name", f"the name is already used by entry {seen[src.name]}")
        seen[src.name] = index
        out.append(src)
    return out


def check_file(path: Path) -> os.stat_result | None:
    """Refuse a symlinked file or another user's; return its stat, or None when it does not exist."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise ConfigError(f"{path} is a symlink; Collie reads only a real file it owns (replace the link with the file)")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{path} is not a regular file")
    if st.st_uid != os.getuid():
        raise ConfigError(f"{path} is owned by uid {st.st_uid}, not by you (uid {os.getuid()}); chown it or remove it")
    return st


def read_sources(path: Path) -> list[Source]:
    """Read `path` strictly. A missing file means no agents."""
    if check_file(path) is None:
        return []
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        return parse_sources(fh.read())


def tighten_mode(path: Path) -> str | None:
    """A6: make the file 0600; return the old mode (e.g. "0644") when it had to change."""
    st = check_file(path)
    if st is None or stat.S_IMODE(st.st_mode) == 0o600:
        return None
    os.chmod(path, 0o600)
    return f"{stat.S_IMODE(st.st_mode):04o}"


def render(sources: list[Source]) -> bytes:
    lines = ",\n".join("  " + json.dumps(s.to_json()) for s in sources)
    return (f"[\n{lines}\n]\n" if sources else "[]\n").encode()


def write_sources(path: Path, sources: list[Source]) -> None:
    ensure_private_dir(path.parent)
    atomic_write(path, render(sources), mode=0o600)


def upsert(path: Path, source: Source) -> bool:
    """Add or replace `source` by name; True when it replaced an entry (`updated <name>`)."""
    current = read_sources(path)  # raises on a corrupt file: never overwrite what we cannot read
    replaced = any(s.name == source.name for s in current)
    merged = [source if s.name == source.name else s for s in current]
    if not replaced:
        merged.append(source)
    write_sources(path, merged)
    return replaced


def remove(path: Path, name: str) -> bool:
    """Remove the entry called `name`; False when there was none (the file is then untouched)."""
    current = read_sources(path)
    kept = [s for s in current if s.name != name]
    if len(kept) == len(current):
        return False
    write_sources(path, kept)
    return True

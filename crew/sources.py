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

import difflib
import json
import os
import re
import stat
from pathlib import Path

import attrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError

from collie.crew.convert import describe, strict_converter
from collie.crew.errors import ConfigError
from collie.crew.fsutil import atomic_write, ensure_private_dir
from collie.crew.security import check_token_text

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


def _where(index: int, name: str | None, field: str | None) -> str:
    who = f'entry {index} ("{name}")' if name else f"entry {index}"
    return who + (f": field {json.dumps(field)}" if field else "")  # escaped: a field name may hold anything


def _suggest(field: str) -> str:
    close = difflib.get_close_matches(field, FIELDS, n=1, cutoff=0.6)
    return f'; did you mean "{close[0]}"?' if close else ""


def _entry_problems(index: int, raw: object, *, reserved: bool = True) -> tuple[Source | None, list[str]]:
    """Every mistake of one entry, each naming the entry and the field; the entry when it has none."""
    if not isinstance(raw, dict):
        return None, [f"{_where(index, None, None)}: expected an object {{...}}, got {type(raw).__name__}"]
    name = raw.get("name")
    name = name if isinstance(name, str) and NAME_RULE.match(name) else None  # only safe names are echoed
    out: list[str] = []

    def add(field: str | None, text: str) -> None:
        out.append(f"{_where(index, name, field)}: {text}")

    for extra in sorted(k for k in raw if k not in FIELDS):
        add(extra, f"unknown field{_suggest(extra)} (allowed: {', '.join(FIELDS)})")
    try:
        src = _conv.structure({k: v for k, v in raw.items() if k in FIELDS}, Source)
    except (ClassValidationError, ForbiddenExtraKeysError) as exc:
        for path, msg in describe(exc):
            field = path.removeprefix("$.") if path != "$" else None
            if msg == "required field missing":
                msg = "missing; every entry needs it"
            elif field == "token":
                msg = "must be a string"  # never echo what might be a secret
            if field == "name":
                name = None
            add(field, msg)
        return None, out
    if src.kind != "durable":
        add("kind", f'must be "durable", got {src.kind!r:.40}')
    if not NAME_RULE.match(src.name):
        out.append(f"{_where(index, None, 'name')}: {src.name!r:.40} breaks the name rule: 1-32 of a-z, 0-9 and '-', "
                   "starting with a letter or digit")
    elif reserved and src.name == RESERVED_NAME:
        add("name", f'"{RESERVED_NAME}" is the main session\'s name; pick another name')
    if src.socket is not None and src.url is not None:
        add("socket", 'both "socket" and "url" are set; keep one')
    if src.socket is None and src.url is None:
        add("socket", 'neither "socket" nor "url" is set; give one')
    if src.socket is not None and src.url is None and src.token is not None:
        add("token", 'a socket entry takes no "token" (the socket is private instead)')
    if src.url is not None and src.token is None:
        add("url", 'missing "token"')
    if src.token is not None and check_token_text(src.token, "it"):
        add("token", "contains spaces, line breaks or control characters; paste the token again (`openssl rand -hex 32`)")
    return (None if out else src), out


def _json_error(exc: json.JSONDecodeError) -> str:
    """Where the mistake is: a trailing comma is reported at the comma, not at what follows it."""
    doc, pos = exc.doc, exc.pos
    before = pos
    while before > 0 and doc[before - 1] in " \t\r\n":
        before -= 1
    if before > 0 and doc[before - 1] == "," and doc[pos:pos + 1] in ("]", "}"):
        comma = before - 1
        line = doc.count("\n", 0, comma) + 1
        column = comma - (doc.rfind("\n", 0, comma) + 1) + 1
        return f"sources.json is not valid JSON at line {line} column {column}: a trailing comma (remove it)"
    return f"sources.json is not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"


def parse_sources(text: str | bytes) -> list[Source]:
    """Parse and validate the whole file; every problem is named in one `ConfigError`."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8-sig" if text.startswith(b"\xef\xbb\xbf") else "utf-8")
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(_json_error(exc)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"sources.json is not valid JSON: it is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise ConfigError("sources.json is not valid JSON: it is nested too deeply") from None
    if not isinstance(data, list):
        raise ConfigError(f"sources.json must be a JSON array of entries [...], got {type(data).__name__}")
    out: list[Source] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(data, start=1):
        src, found = _entry_problems(index, raw)
        problems += found
        if src is None:
            continue
        if src.name in seen:
            problems.append(f"{_where(index, src.name, 'name')}: the name is already used by entry {seen[src.name]}")
            continue
        seen[src.name] = index
        out.append(src)
    if len(problems) == 1:
        raise ConfigError(f"sources.json {problems[0]}")
    if problems:
        listed = "; ".join(f"({n}) {p}" for n, p in enumerate(problems, start=1))
        raise ConfigError(f"sources.json has {len(problems)} mistakes: {listed}")
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


def read_private(path: Path) -> bytes | None:
    """The bytes of a file that holds secrets, refused as `check_file` says; None when it does not exist."""
    if check_file(path) is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def check_config_dir(folder: Path) -> None:
    """Refuse a config folder that others could write: they could swap the files holding tokens.

    The folder itself may be a symlink (to a dotfiles folder, say); what it points to is judged.
    """
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"the config folder {folder} is not a folder")
    if st.st_uid != os.getuid():
        raise ConfigError(f"the config folder {folder} is owned by uid {st.st_uid}, not by you (uid {os.getuid()}); "
                          "set COLLIE_CONFIG_DIR to a folder of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(f"the config folder {folder} has mode {stat.S_IMODE(st.st_mode):04o}: others could replace "
                          f"the files holding tokens in it; chmod 700 {folder}")


def read_sources(path: Path) -> list[Source]:
    """Read `path` strictly. A missing file means no agents."""
    data = read_private(path)
    return [] if data is None else parse_sources(data)


def tighten_mode(path: Path) -> str | None:
    """A6 (sources.json, .env, crew.json): make the file 0600; return the old mode (e.g. "0644") when it changed."""
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

"""crew.json: this machine's membership of a crew (written by `collie crew join`, crew.md §1).

``{"version": 1, "lead": "wss://lead.example:8470/crew/v1", "token": "…", "label": "laptop",
"ca_sha256": "AB:CD:…"}``, beside sources.json, mode 0600, strict like sources.json (unknown fields are errors).
`ca_sha256` (optional) is the SHA-256 of the lead's own certificate authority from the invite's join command:
the member trusts that authority for this lead, besides the system's (crew.md §2). Its presence makes
`collie serve` run this machine as a member.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from urllib.parse import urlsplit

import attrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError

from collie.crew.convert import describe, strict_converter
from collie.crew.errors import ConfigError
from collie.crew.fsutil import atomic_write, ensure_private_dir
from collie.crew.security import Problem, check_token, check_url
from collie.crew.sources import read_private


@attrs.frozen
class CrewConfig:
    version: int
    lead: str
    token: str = attrs.field(repr=False)
    label: str
    ca_sha256: str | None = None


_conv = strict_converter()


def check_lead_address(url: str) -> Problem | None:
    """wss:// on the network; ws:// only to 127.0.0.1 / localhost with a port (the T4 rule)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("ws", "wss"):
        return Problem("bad-url", "the lead address must start with https:// or wss:// "
                                  "(http:// or ws:// only to this machine)")
    as_http = ("https" if scheme == "wss" else "http") + url[len(parts.scheme):]
    problem = check_url(as_http)
    if problem:
        return Problem(problem.code, problem.text.replace("https://", "wss://").replace("http://", "ws://"))
    return None


FIELDS = ("version", "lead", "token", "label", "ca_sha256")


def check_fingerprint(text: str) -> str:
    """A SHA-256 fingerprint as given (`AB:CD:…`, any case, colons optional) → `AB:CD:…`; ValueError says why."""
    digits = text.strip().replace(":", "").upper()
    if len(digits) != 64 or any(c not in "0123456789ABCDEF" for c in digits):
        raise ValueError("a SHA-256 fingerprint is 64 hexadecimal digits (AB:CD:… as `collie crew invite` prints it)")
    return ":".join(digits[i:i + 2] for i in range(0, 64, 2))


def read_crew(path: Path) -> CrewConfig | None:
    """Read crew.json strictly (guarded like sources.json); every mistake is named, the token never echoed."""
    raw = read_private(path)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise ConfigError(f"crew.json is not valid JSON{where}: {getattr(exc, 'msg', None) or type(exc).__name__}"
                          "; run `collie crew join` again") from None
    if not isinstance(data, dict):
        raise ConfigError(f"crew.json must be a JSON object {{...}}, got {type(data).__name__}")
    problems: list[str] = []
    for extra in sorted(k for k in data if k not in FIELDS):
        close = difflib.get_close_matches(extra, FIELDS, n=1, cutoff=0.6)
        problems.append(f"field {json.dumps(extra)}: unknown field" + (f'; did you mean "{close[0]}"?' if close else ""))
    cfg = None
    try:
        cfg = _conv.structure({k: v for k, v in data.items() if k in FIELDS}, CrewConfig)
    except (ClassValidationError, ForbiddenExtraKeysError) as exc:
        for where, msg in describe(exc):
            field = where.removeprefix("$.") if where != "$" else "?"
            problems.append(f"field {json.dumps(field)}: {'must be a string' if field == 'token' and 'missing' not in msg else msg}")
    if cfg is not None:
        problem = check_lead_address(cfg.lead)
        if problem:
            problems.append(f'field "lead": {problem.text}')
        if cfg.ca_sha256 is not None:
            try:
                check_fingerprint(cfg.ca_sha256)
            except ValueError as exc:
                problems.append(f'field "ca_sha256": {exc}')
        problem = check_token(cfg.token, "crew.json", "the member token")
        if problem:
            problems.append(f'field "token": {problem.text} (ask the lead for a new invite)')
    if problems:
        raise ConfigError("crew.json: " + "; ".join(problems))
    return cfg


def write_crew(path: Path, cfg: CrewConfig) -> None:
    ensure_private_dir(path.parent)
    data = {k: v for k, v in attrs.asdict(cfg).items() if v is not None}
    atomic_write(path, (json.dumps(data, indent=2) + "\n").encode(), mode=0o600)


def remove_crew(path: Path) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False

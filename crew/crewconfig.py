"""crew.json: this machine's membership of a crew (written by `collie crew join`, crew.md §1).

``{"version": 1, "lead": "wss://lead.example:8470/crew/v1", "token": "…", "label": "laptop"}``,
beside sources.json, mode 0600, strict like sources.json (unknown fields are errors). Its presence
makes `collie serve` run this machine as a member.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlsplit

import attrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError

from crew.convert import describe, strict_converter
from crew.errors import ConfigError
from crew.fsutil import atomic_write, ensure_private_dir
from crew.security import Problem, check_url
from crew.sources import check_file


@attrs.frozen
class CrewConfig:
    version: int
    lead: str
    token: str = attrs.field(repr=False)
    label: str


_conv = strict_converter()


def check_lead_address(url: str) -> Problem | None:
    """wss:// on the network; ws:// only to 127.0.0.1 / localhost with a port (the T4 rule)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("ws", "wss"):
        return Problem("bad-url", "the lead address must start with wss:// (or ws:// to this machine)")
    as_http = ("https" if scheme == "wss" else "http") + url[len(parts.scheme):]
    problem = check_url(as_http)
    if problem:
        return Problem(problem.code, problem.text.replace("https://", "wss://").replace("http://", "ws://"))
    return None


def read_crew(path: Path) -> CrewConfig | None:
    if check_file(path) is None:
        return None
    try:
        data = json.loads(path.read_text())
        cfg = _conv.structure(data, CrewConfig)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"crew.json is not valid JSON: {exc}") from None
    except (ClassValidationError, ForbiddenExtraKeysError) as exc:
        where, msg = describe(exc)[0]
        field = where.removeprefix("$.") if where != "$" else "?"
        raise ConfigError(f"crew.json: field {json.dumps(field)}: {'must be a string' if field == 'token' else msg}") from None
    problem = check_lead_address(cfg.lead)
    if problem:
        raise ConfigError(f'crew.json: field "lead": {problem.text}')
    return cfg


def write_crew(path: Path, cfg: CrewConfig) -> None:
    ensure_private_dir(path.parent)
    atomic_write(path, (json.dumps(attrs.asdict(cfg), indent=2) + "\n").encode(), mode=0o600)


def remove_crew(path: Path) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False

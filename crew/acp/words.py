"""What the person sees when an ACP agent fails or needs a login (issue 24 items 1 and 4), as plain
words: no Python class names, the agent's own reason where it gave one.

- `reason_of(exc)`: an agent's JSON-RPC error becomes its message and the text in its `data` (a
  string, or `details`/`detail`/`message`/`error`/`reason` in an object — where a 401 from the
  model or an unreachable server is said); a generic message (`Internal error`) gives way to that
  text. Other failures say what happened (`the agent exited before it answered`, …).
- `choose_auth(methods, env, wanted)`: the login method to `authenticate` with — the one `--auth`
  names, else the first whose environment variables are all set (`env_var` methods list them; an
  older untyped method naming `SOME_API_KEY` in its name or description counts too); None when none
  applies (the agent may be logged in already).
- `login_needed(methods)`: the sentence shown on the agent's row when it answers `Authentication
  required` (−32000): what it offers and what to do.
- `says_error(line)`, `is_frame(line)`: which stderr lines of an agent that exited while starting
  say what went wrong (`Error:`/`error:`/`fatal`/a panic) and which are a backtrace's frames
  (`   9: clone3`, `at ./nptl/pthread_create.c:442:8`: RUST_BACKTRACE=1), not a reason.
Every text is one line of printable characters, at most `REASON_MAX` long.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pydantic
import trio
from acp import schema

from collie.crew.acp.rpc import Closed, RpcError

AUTH_REQUIRED = -32000
REASON_MAX = 400
LOGIN_MAX = 500  # what the bridge keeps of an agent's message
GENERIC = {"internal error", "invalid params", "invalid request", "method not found", "parse error", "error",
           "server error", "request failed"}
DATA_KEYS = ("details", "detail", "message", "error", "reason")
FRAME = re.compile(r"^(?:\d+: |at \S.*:\d+\)?$|stack backtrace:?$|note: .*backtrace)", re.IGNORECASE)
SAYS_ERROR = re.compile(r"^(?:error\b|fatal\b|panic\b|thread '.*' panicked)", re.IGNORECASE)
ENV_NAME = re.compile(r"\b[A-Z][A-Z0-9_]*_(?:API_KEY|KEY|TOKEN)\b")


class Refusal(Exception):
    """The agent answers but will not work (a refused initialize or login): shown on its row; the
    agent is not restarted for it."""


def plain(text: str, limit: int = REASON_MAX) -> str:
    """One line of printable text: control characters become spaces, runs of spaces one, cut with `…`."""
    clean = "".join(c if c.isprintable() else " " for c in text)
    clean = " ".join(clean.split())
    return clean if len(clean) <= limit else clean[:limit - 1] + "…"


def _data_text(data: Any, depth: int = 0) -> str | None:
    if isinstance(data, str):
        return data.strip() or None
    if isinstance(data, dict) and depth < 3:
        for key in DATA_KEYS:
            text = _data_text(data.get(key), depth + 1)
            if text:
                return text
    return None


def _http_error(msg: str) -> str:
    """A model server's JSON error body passed on as the message (Gemini CLI: `{"error": {"code": 401,
    "message": "…", "status": "UNAUTHENTICATED"}}`) as `401 UNAUTHENTICATED: …`; anything else as it is."""
    if not msg.startswith("{") or len(msg) > 20000:
        return msg
    try:
        body = json.loads(msg)
    except ValueError:
        return msg
    error = body.get("error") if isinstance(body, dict) else None
    said = error.get("message") if isinstance(error, dict) else None
    if not isinstance(said, str) or not said.strip():
        return msg
    head = " ".join(str(error[k]) for k in ("code", "status") if isinstance(error.get(k), int | str) and error[k] != "")
    return f"{head}: {said.strip()}" if head else said.strip()


def reason_of(exc: BaseException) -> str:
    if isinstance(exc, RpcError):
        msg = _http_error((exc.message or "").strip())
        detail = _data_text(exc.data)
        if detail and (not msg or msg.lower().rstrip(".") in GENERIC):
            text = detail
        elif detail and detail not in msg:
            text = f"{msg}: {detail}"
        else:
            text = msg or f"an error without a message (code {exc.code})"
    elif isinstance(exc, Closed):
        text = "the agent exited before it answered"
    elif isinstance(exc, trio.TooSlowError):
        text = "the agent did not answer in time"
    elif isinstance(exc, pydantic.ValidationError):
        text = "the agent's answer does not fit the ACP schema"
    else:
        text = str(exc) or "an unexpected failure"
    return plain(text)


def _env_names(method: Any) -> list[str]:
    if isinstance(method, schema.EnvVarAuthMethod):
        return [v.name for v in method.vars if not v.optional]
    if isinstance(method, schema.AuthMethodAgent):
        return ENV_NAME.findall(f"{method.name} {method.description or ''}")
    return []


def choose_auth(methods: list, env: dict[str, str], wanted: str | None) -> Any | None:
    """The method to authenticate with; raises Refusal when `--auth` names one the agent lacks."""
    if wanted is not None:
        for m in methods:
            if m.id == wanted:
                return m
        offered = ", ".join(m.id for m in methods) or "none"
        raise Refusal(plain(f"--auth {wanted}: the agent offers no such login method (it offers: {offered})"))
    for m in methods:
        names = _env_names(m)
        if names and all(env.get(n) for n in names):
            return m
    return None


def login_needed(methods: list) -> str:
    if not methods:
        return plain("The agent needs a login and offers no way to log in through ACP: log in with the agent's "
                     "own command on this machine, then start collie acp run again.")
    ways = "; ".join(f"{m.name} (--auth {m.id})" + (f": {m.description.rstrip('. ')}" if m.description else "")
                     for m in methods)
    return plain(f"The agent needs a login. It offers: {ways}. Set what it needs in the environment of collie acp "
                 f"run, or pick one with --auth METHOD, and start it again.", LOGIN_MAX)


def is_frame(line: str) -> bool:
    """A backtrace's frame or its header (`   9: clone3`, `at ./nptl/pthread_create.c:442:8`)."""
    return bool(FRAME.match(line.strip()))


def says_error(line: str) -> bool:
    """A line that says what went wrong (`Error: error loading config: …`, `fatal: …`, a panic)."""
    return bool(SAYS_ERROR.match(line.strip()))

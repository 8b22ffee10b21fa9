"""What the bridge attaches at start: `sources.json` plus the `.env` single-agent form.

`.env` lines are ``KEY=VALUE`` (optional ``export``, quotes, ``#`` comments). The process
environment wins over the file, so a service manager can override it.

- A13: ``COLLIE_MUX=durable`` with ``COLLIE_DURABLE_SOCKET`` or ``COLLIE_DURABLE_URL`` +
  ``COLLIE_DURABLE_TOKEN`` drives one agent named ``default``. A wrong combination does not stop the
  bridge (unlike sources.json): the agent shows Unreachable with reason ``config`` and the text.
- A14: ``COLLIE_PROGRAMS=off`` ignores sources.json (the file is left untouched); A13 still applies.
"""

from __future__ import annotations

import os

import attrs

from collie.crew.errors import ConfigError
from collie.crew.paths import Paths
from collie.crew.security import Problem, check_token_text
from collie.crew.sources import RESERVED_NAME, Source, check_config_dir, read_private, read_sources


@attrs.frozen
class AgentConfig:
    """One agent the bridge should reach. `problem` set means: show Unreachable with that reason."""

    name: str
    socket: str | None = None
    url: str | None = None
    token: str | None = attrs.field(default=None, repr=False)
    problem: Problem | None = None
    origin: str = "sources.json"  # or ".env"

    @property
    def transport(self) -> str:
        return "socket" if self.socket else "url" if self.url else "none"

    @property
    def address(self) -> str:
        return self.socket or self.url or ""

    @classmethod
    def from_source(cls, src: Source) -> AgentConfig:
        return cls(name=src.name, socket=src.socket, url=src.url, token=src.token)


def parse_dotenv(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        out[key] = value
    return out


def load_env(paths: Paths, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The `.env` file overlaid by the process environment."""
    merged: dict[str, str] = {}
    raw = read_private(paths.dotenv)  # refuses a symlink or another user's file, like sources.json
    if raw is not None:
        try:
            merged.update(parse_dotenv(raw.decode()))
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{paths.dotenv} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    env = os.environ if environ is None else environ
    merged.update({k: v for k, v in env.items() if k.startswith("COLLIE_")})
    return merged


def programs_off(env: dict[str, str]) -> bool:
    return env.get("COLLIE_PROGRAMS", "").strip().lower() in ("off", "0", "false", "no")


def single_agent(env: dict[str, str]) -> AgentConfig | None:
    """A13: the `default` agent of a durable-only instance, or None when COLLIE_MUX is not durable."""
    if env.get("COLLIE_MUX", "").strip().lower() != "durable":
        return None
    sock = env.get("COLLIE_DURABLE_SOCKET") or None
    url = env.get("COLLIE_DURABLE_URL") or None
    token = env.get("COLLIE_DURABLE_TOKEN") or None
    text = None
    if sock and url:
        text = "both COLLIE_DURABLE_SOCKET and COLLIE_DURABLE_URL are set in .env; keep one"
    elif url and not token:
        text = "COLLIE_DURABLE_URL is set without COLLIE_DURABLE_TOKEN in .env"
    elif token and not url:
        text = "COLLIE_DURABLE_TOKEN is set without COLLIE_DURABLE_URL in .env"
    elif not sock and not url:
        text = "COLLIE_MUX=durable needs COLLIE_DURABLE_SOCKET or COLLIE_DURABLE_URL in .env"
    elif token and check_token_text(token, "COLLIE_DURABLE_TOKEN"):
        text = "COLLIE_DURABLE_TOKEN contains spaces, line breaks or control characters; set the token again"
    if text:
        return AgentConfig(name=RESERVED_NAME, problem=Problem("config", text), origin=".env")
    return AgentConfig(name=RESERVED_NAME, socket=sock, url=url, token=token, origin=".env")


@attrs.frozen
class BridgeConfig:
    agents: tuple[AgentConfig, ...]
    programs_off: bool
    sources_count: int  # entries in sources.json (0 when off or missing)
    env_token: str | None = attrs.field(default=None, repr=False)  # .env's token, even when its form is broken


def load_bridge_config(paths: Paths, environ: dict[str, str] | None = None) -> BridgeConfig:
    """Everything the bridge attaches. Raises `ConfigError` for a broken sources.json (A4)."""
    check_config_dir(paths.config_dir)
    env = load_env(paths, environ)
    off = programs_off(env)
    sources = [] if off else read_sources(paths.sources)
    agents = [AgentConfig.from_source(s) for s in sources]
    default = single_agent(env)
    if default is not None:
        agents.insert(0, default)
    return BridgeConfig(agents=tuple(agents), programs_off=off, sources_count=len(sources),
                        env_token=env.get("COLLIE_DURABLE_TOKEN") or None)


def secrets_of(config: BridgeConfig) -> list[str]:
    """Every token the configuration holds, for the log's redactor (issue 9.11: whatever its length)."""
    return [a.token for a in config.agents if a.token] + ([config.env_token] if config.env_token else [])

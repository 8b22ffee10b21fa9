"""Where Collie keeps things (features A2, S1).

config folder: $COLLIE_CONFIG_DIR, else $XDG_CONFIG_HOME/collie, else ~/.config/collie
state folder:  $COLLIE_STATE_DIR,  else $XDG_STATE_HOME/collie,  else ~/.local/state/collie
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs


def _xdg(var: str, fallback: str, env: dict[str, str]) -> Path:
    base = env.get(var)
    if base and os.path.isabs(base):
        return Path(base)
    return Path(env.get("HOME") or os.path.expanduser("~")) / fallback


@attrs.frozen
class Paths:
    config_dir: Path
    state_dir: Path

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Paths:
        env = dict(os.environ) if env is None else env
        config = env.get("COLLIE_CONFIG_DIR")
        state = env.get("COLLIE_STATE_DIR")
        return cls(
            config_dir=Path(config) if config else _xdg("XDG_CONFIG_HOME", ".config", env) / "collie",
            state_dir=Path(state) if state else _xdg("XDG_STATE_HOME", ".local/state", env) / "collie",
        )

    @property
    def sources(self) -> Path:
        return self.config_dir / "sources.json"

    @property
    def dotenv(self) -> Path:
        return self.config_dir / ".env"

    @property
    def crew(self) -> Path:
        return self.config_dir / "crew.json"

    @property
    def log(self) -> Path:
        return self.state_dir / "bridge.log"

    @property
    def control_socket(self) -> Path:
        return self.state_dir / "bridge.sock"

    @property
    def durable_dir(self) -> Path:
        return self.state_dir / "durable"

    def agent_dir(self, name: str) -> Path:
        return self.durable_dir / name

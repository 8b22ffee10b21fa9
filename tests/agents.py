"""The real ACP agents the tests drive (issues 24 and 38), from the npm registry: Codex
(`@zed-industries/codex-acp`), Claude Code (`@zed-industries/claude-code-acp` and its successor
`@zed-industries/claude-agent-acp`), Gemini CLI (`@google/gemini-cli`), Qwen Code
(`@qwen-code/qwen-code`) and opencode (`opencode-ai`).

`python -m tests.browser` (the README's test command runs it before pytest) calls `ensure()`: it
installs the pinned packages into `tests/.agents/` (git-ignored) with npm, and Debian's `nodejs` and
`npm` first (as root, with apt-get) when `node` is missing. When all are there already at the pinned
versions it only checks and says so; nothing is fetched again.

`codex(...)`, `claude(...)`, `claude_agent(...)`, `gemini(...)`, `qwen(...)` and `opencode(...)` give
each agent's command and environment for one test: a private home (and each agent's own settings
there) whose model is the tests' stand-in, so that nothing of the machine's own logins or settings
is read; telemetry, update checks and other side traffic are off.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent / ".agents"
PINNED = {"@zed-industries/codex-acp": "0.16.0", "@zed-industries/claude-code-acp": "0.16.2",
          "@zed-industries/claude-agent-acp": "0.23.1", "@google/gemini-cli": "0.61.0",
          "@qwen-code/qwen-code": "0.24.4", "opencode-ai": "1.18.33"}
CODEX_JS = ROOT / "node_modules" / "@zed-industries" / "codex-acp" / "bin" / "codex-acp.js"
CLAUDE_JS = ROOT / "node_modules" / "@zed-industries" / "claude-code-acp" / "dist" / "index.js"
CLAUDE_AGENT_JS = ROOT / "node_modules" / "@zed-industries" / "claude-agent-acp" / "dist" / "index.js"
GEMINI_JS = ROOT / "node_modules" / "@google" / "gemini-cli" / "bundle" / "gemini.js"
QWEN_JS = ROOT / "node_modules" / "@qwen-code" / "qwen-code" / "cli-entry.js"
OPENCODE_BIN = ROOT / "node_modules" / "opencode-ai" / "bin" / "opencode.exe"  # the native program itself
ENTRY = (CODEX_JS, CLAUDE_JS, CLAUDE_AGENT_JS, GEMINI_JS, QWEN_JS, OPENCODE_BIN)
CODEX_BINARY = "codex-acp"  # the native program codex-acp.js starts (from codex-acp-linux-x64 etc.)
NODE_MIN = 18


def installed_version(package: str) -> str | None:
    try:
        return json.loads((ROOT / "node_modules" / package / "package.json").read_text()).get("version")
    except (OSError, ValueError):
        return None


def node_major() -> int | None:
    node = shutil.which("node")
    if node is None:
        return None
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=20).stdout
        return int(out.strip().lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def ready() -> bool:
    return (node_major() or 0) >= NODE_MIN and all(installed_version(p) == v for p, v in PINNED.items()) \
        and all(path.exists() for path in ENTRY)


def _apt_node() -> int:
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        print("the real-agent tests need Node.js 18 or newer with npm: install Debian's `nodejs` and `npm` "
              "(sudo apt-get install nodejs npm)", file=sys.stderr)
        return 1
    print("installing Debian's nodejs and npm for the real-agent tests…", file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "nodejs", "npm"]):
        done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            print(f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}", file=sys.stderr)
            return 1
    return 0


def ensure() -> int:
    if ready():
        print(f"real ACP agents: {', '.join(f'{p}@{v}' for p, v in PINNED.items())} already in {ROOT}",
              file=sys.stderr, flush=True)
        return 0
    if (node_major() is None or shutil.which("npm") is None) and _apt_node() != 0:
        return 1
    major = node_major()
    if major is None or major < NODE_MIN:
        print(f"the real-agent tests need Node.js {NODE_MIN} or newer; this one is {major}", file=sys.stderr)
        return 1
    ROOT.mkdir(exist_ok=True)
    (ROOT / "package.json").write_text(json.dumps({"name": "collie-test-agents", "private": True,
                                                   "dependencies": PINNED}, indent=1) + "\n")
    print(f"installing {', '.join(f'{p}@{v}' for p, v in PINNED.items())} into {ROOT} with npm "
          "(a minute or two)…", file=sys.stderr, flush=True)
    done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--no-package-lock", "--loglevel=error"],
                          cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=900)
    if done.returncode != 0 or not ready():
        print(f"npm install failed: {done.stderr.strip()[-800:]}", file=sys.stderr)
        return 1
    return 0


# --- one test's agent: command and environment --------------------------------------------------

def _base_env(home: Path, extra: dict[str, str]) -> dict[str, str]:
    """The test process's environment less what could reach a real account or the network, and less
    RUST_BACKTRACE (set on some machines): with it Codex ends an error with a stack trace (the test of a
    Codex that cannot start sets it, to check that the row still gives the reason)."""
    drop = ("OPENAI_", "CODEX_", "ANTHROPIC_", "CLAUDE_", "COLLIE_", "RUST_BACKTRACE", "RUST_LIB_BACKTRACE",
            "GEMINI_", "GOOGLE_", "QWEN_", "DASHSCOPE_", "OPENCODE_", "XDG_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(HOME=str(home), NO_COLOR="1", **extra)
    return env


def codex(home: Path, model_url: str, *, auth: bool = False) -> tuple[list[str], dict[str, str]]:
    """codex-acp through its npm launcher (node starts the native binary), its model the stand-in.

    `approval_policy = "untrusted"` makes Codex ask before any command that is not read-only and before
    every edit; `danger-full-access` because its sandbox needs bubblewrap, which a CI machine may lack.
    No retries: an error from the model reaches the client at once. With `auth`, the provider needs
    Codex's own login (as the default OpenAI provider does): `OPENAI_API_KEY` through `authenticate`."""
    codex_home = home / "codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    key_line = "requires_openai_auth = true" if auth else 'env_key = "STANDIN_API_KEY"'
    (codex_home / "config.toml").write_text(f'''model = "gpt-5.4"
model_provider = "standin"
approval_policy = "untrusted"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[model_providers.standin]
name = "Model stand-in"
base_url = "{model_url}/v1"
wire_api = "responses"
{key_line}
request_max_retries = 0
stream_max_retries = 0
''')
    extra = {"CODEX_HOME": str(codex_home)}
    extra["OPENAI_API_KEY" if auth else "STANDIN_API_KEY"] = "sk-standin-test"
    return ["node", str(CODEX_JS)], _base_env(home, extra)


def claude(home: Path, model_url: str) -> tuple[list[str], dict[str, str]]:
    """claude-code-acp (Claude Code through the Claude Agent SDK), its model the stand-in.

    `IS_SANDBOX=1`: as root (CI runs as root) claude-code-acp offers Bypass Permissions when IS_SANDBOX
    is set at all, and Claude Code then refuses every session unless it is exactly "1" (a machine may
    have `IS_SANDBOX=yes`). Telemetry, update checks and other side traffic are off (the machine has no
    network but the stand-in), and no retries: an error from the model reaches the client at once."""
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    return ["node", str(CLAUDE_JS)], _base_env(home, {
        "ANTHROPIC_BASE_URL": model_url, "ANTHROPIC_API_KEY": "sk-ant-standin-test", "IS_SANDBOX": "1",
        "CLAUDE_CONFIG_DIR": str(home / ".claude"), "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0"})


def claude_agent(home: Path, model_url: str) -> tuple[list[str], dict[str, str]]:
    """claude-agent-acp (claude-code-acp's successor, the Claude Agent SDK), set up as `claude`."""
    _, env = claude(home, model_url)
    return ["node", str(CLAUDE_AGENT_JS)], env


def _settings(path: Path, settings: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=1) + "\n")


def gemini(home: Path, model_url: str) -> tuple[list[str], dict[str, str]]:
    """Gemini CLI in ACP mode (`gemini --acp`; `--experimental-acp` is its older name), its model the stand-in.

    `GOOGLE_GEMINI_BASE_URL` sends the Gemini API there; `GEMINI_API_KEY` with `selectedType:
    gemini-api-key` in `~/.gemini/settings.json` is its login. Usage statistics, telemetry, update
    checks and the folder-trust prompt are off; `GEMINI_CLI_NO_RELAUNCH` keeps it one process."""
    _settings(home / ".gemini" / "settings.json", {
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True, "checkpointing": {"enabled": False}},
        "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
        "model": {"name": "gemini-2.5-flash"}})
    return ["node", str(GEMINI_JS), "--acp"], _base_env(home, {
        "GOOGLE_GEMINI_BASE_URL": model_url, "GEMINI_API_KEY": "standin-gemini-key",
        "GEMINI_CLI_NO_RELAUNCH": "true", "GEMINI_TELEMETRY_ENABLED": "false"})


def qwen(home: Path, model_url: str) -> tuple[list[str], dict[str, str]]:
    """Qwen Code in ACP mode (`qwen --acp`; 0.24 still takes `--experimental-acp`, with a warning that
    it is deprecated), an OpenAI-compatible model: the stand-in.

    `OPENAI_BASE_URL`, `OPENAI_API_KEY` and `OPENAI_MODEL` with `selectedType: openai` in
    `~/.qwen/settings.json`. Its default mode runs tools without asking: the tests run it with
    `collie acp run --mode default`, which asks first."""
    _settings(home / ".qwen" / "settings.json", {
        "security": {"auth": {"selectedType": "openai"}, "folderTrust": {"enabled": False}},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True, "checkpointing": {"enabled": False}},
        "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False}})
    return ["node", str(QWEN_JS), "--acp"], _base_env(home, {
        "OPENAI_BASE_URL": f"{model_url}/v1", "OPENAI_API_KEY": "sk-standin-test", "OPENAI_MODEL": "stand-in"})


def opencode(home: Path, model_url: str) -> tuple[list[str], dict[str, str]]:
    """opencode's ACP server (`opencode acp`), its model an OpenAI-compatible provider: the stand-in.

    The provider, the model and the permissions (edits and shell commands: `ask`) are in
    `OPENCODE_CONFIG_CONTENT`; update checks, model list fetches, sharing, LSP downloads and the
    default plugins are off."""
    config = {"$schema": "https://opencode.ai/config.json", "model": "standin/stand-in", "autoupdate": False,
              "share": "disabled", "permission": {"edit": "ask", "bash": "ask"},
              "provider": {"standin": {"npm": "@ai-sdk/openai-compatible", "name": "Model stand-in",
                                       "options": {"baseURL": f"{model_url}/v1", "apiKey": "sk-standin-test"},
                                       "models": {"stand-in": {"name": "Stand-in"}}}}}
    return [str(OPENCODE_BIN), "acp"], _base_env(home, {
        "OPENCODE_CONFIG_CONTENT": json.dumps(config), "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_SHARE": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1", "OPENCODE_DISABLE_CLAUDE_CODE": "1",
        "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"), "XDG_STATE_HOME": str(home / ".local" / "state")})


KINDS = {"codex": codex, "claude": claude, "claude-agent": claude_agent, "gemini": gemini, "qwen": qwen,
         "opencode": opencode}


if __name__ == "__main__":
    sys.exit(ensure())

"""`collie acp run -- <agent command…>`: any ACP agent as a durable agent (issue 14, docs/acp.md).

Starts the agent as a child process (this process is its ACP client), serves it on a private socket
(default `$XDG_RUNTIME_DIR/collie-acp/<name>/app.sock`, folders 0700, socket 0600) and prints the exact
`collie durable attach` line, or runs that attach itself with `--attach`. Sessions and the SDK's
state are kept in `<state folder>/acp/<name>/` so that conversations survive a restart.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import sys
from pathlib import Path

import trio

from collie.crew.errors import CollieError, UsageError
from collie.crew.fsutil import ensure_private_dir
from collie.crew.sources import NAME_RULE, RESERVED_NAME


def register(sub) -> None:
    p = sub.add_parser("acp", help="serve an Agent Client Protocol agent as a durable agent",
                       description="Serve an Agent Client Protocol (ACP) agent as a durable agent.")
    verbs = p.add_subparsers(dest="acp_verb", metavar="VERB")
    verbs.required = True
    r = verbs.add_parser("run", help="start an ACP agent and serve it on a private socket",
                         usage="collie acp run [--name NAME] [--cwd DIR] [--socket PATH] [--attach] "
                               "[--allow-terminal] [--terminal-env NAME] [--auth METHOD] [--mode MODE] [--config ID=VALUE] -- <agent command…>")
    r.add_argument("--name", help="the agent's name in Collie (default: from the command)")
    r.add_argument("--cwd", default=".", help="the agent's folder: sessions start here, files stay inside")
    r.add_argument("--socket", metavar="PATH", help="default $XDG_RUNTIME_DIR/collie-acp/<name>/app.sock")
    r.add_argument("--attach", action="store_true", help="attach it to the bridge (collie durable attach --restart)")
    r.add_argument("--allow-terminal", action="store_true", help="let the agent run commands in terminals")
    r.add_argument("--auth", metavar="METHOD",
                   help="log in with this of the agent's authMethods (default: the one your environment provides)")
    r.add_argument("--mode", metavar="MODE",
                   help="put each new session in this of the agent's modes (Codex: auto, to let it edit)")
    r.add_argument("--config", metavar="ID=VALUE", action="append", default=[],
                   help="set this of the agent's config options in each new session, e.g. model=gpt-5.4 (repeat)")
    r.add_argument("--terminal-env", metavar="NAME", action="append", default=[],
                   help="also pass this variable of your environment to terminals (repeat for more)")
    r.add_argument("command", nargs=argparse.REMAINDER, help="the ACP agent's command, after --")
    r.set_defaults(run=run)


LAUNCHERS = {"python", "python3", "node", "npx", "bunx", "bun", "deno", "uv", "uvx", "pipx", "sh", "bash", "env", "run"}


def default_name(command: list[str]) -> str:
    """The name from the command: `npx @zed-industries/claude-code-acp` → `claude-code-acp`,
    `python tests/acp_agent.py` → `acp-agent`, `gemini --experimental-acp` → `gemini`."""
    words = [w for w in command if not w.startswith("-")] or command
    pick = words[0]
    for word in words:
        base = re.sub(r"\d+(\.\d+)*$", "", Path(word).name.lower())
        if base not in LAUNCHERS:
            pick = word
            break
    if not pick.startswith("@"):
        pick = pick.split("@")[0]  # foo@1.2 → foo; @scope/name keeps its scope for Path().name to drop
    base = Path(pick).name.lower()
    base = re.sub(r"\.(py|js|mjs|cjs|ts)$", "", base)
    name = re.sub(r"[^a-z0-9-]+", "-", base).strip("-")[:32].strip("-")
    return name or "acp"


def default_socket(name: str) -> str:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if not runtime:
        raise UsageError("XDG_RUNTIME_DIR is not set; give the socket's path with --socket")
    return str(Path(runtime) / "collie-acp" / name / "app.sock")


def run(args, paths) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise UsageError("give the agent's command after --, e.g. collie acp run -- gemini --experimental-acp")
    for var in args.terminal_env:
        if var.startswith("COLLIE_"):
            raise UsageError(f"--terminal-env {var}: Collie's own variables (its tokens) are never passed to terminals")
    name = args.name or default_name(command)
    if not NAME_RULE.match(name) or name == RESERVED_NAME:
        raise UsageError(f"{name!r} breaks the name rule: 1-32 of a-z, 0-9 and '-', starting with a letter or digit"
                         f" (and not {RESERVED_NAME!r}); give one with --name")
    cwd = os.path.realpath(args.cwd)
    if not os.path.isdir(cwd):
        raise UsageError(f"--cwd {args.cwd!r} is not a folder")
    socket = os.path.abspath(args.socket) if args.socket else default_socket(name)
    if not args.socket:
        ensure_private_dir(Path(socket).parent.parent)
    ensure_private_dir(Path(socket).parent)
    config = {}
    for item in args.config:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UsageError(f"--config {item!r}: give ID=VALUE, e.g. --config model=gpt-5.4")
        config[key] = value
    args.config_map = config
    state_dir = paths.state_dir / "acp" / name
    ensure_private_dir(paths.state_dir)
    ensure_private_dir(state_dir.parent)
    try:
        trio.run(_serve, command, name, cwd, socket, state_dir, args, paths)
    except KeyboardInterrupt:
        return 130
    return 0


async def _serve(command, name, cwd, socket, state_dir, args, paths) -> None:
    from collie.crew.acp.adapter import CAPS, Adapter
    from collie.crew.sdk import open_collie

    adapter = Adapter(command, name=name, cwd=cwd, state_dir=state_dir, allow_terminal=args.allow_terminal,
                      terminal_env=tuple(args.terminal_env), auth=args.auth,
                      mode=args.mode, config=args.config_map)
    async with open_collie(socket=socket, host_name=name, runtime=name, caps=CAPS, on_send=adapter.on_send,
                           on_starter=adapter.on_starter, on_action=adapter.on_action, state_path=state_dir / "agent.json") as collie:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal, nursery.cancel_scope)
            await nursery.start(adapter.serve, collie)
            collie.ready()
            line = f"collie durable attach {shlex.quote(name)} --socket {shlex.quote(socket)} --restart"
            print(f"listening {socket}", flush=True)
            if args.attach:
                await trio.to_thread.run_sync(_attach, name, socket, paths)
            else:
                print(f"attach it with: {line}", flush=True)


def _attach(name: str, socket: str, paths) -> None:
    """`collie durable attach <name> --socket <socket> --restart`, the same code path."""
    from collie.crew.cli import durable

    ns = argparse.Namespace(name=name, socket=socket, url=None, token_env=None, restart=True, parser=None)
    try:
        durable.attach(ns, paths)
    except CollieError as exc:
        print(f"collie acp: {exc}", file=sys.stderr, flush=True)


async def _stop_on_signal(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
        async for _ in signals:
            scope.cancel()
            return

"""`collie durable attach|detach|list` (features A9–A12).

attach/detach change sources.json (atomically, 0600) and restart nothing unless `--restart`.
They refuse to touch a file they cannot parse. attach checks the address and token by T1–T5 before
writing; the token is read from the variable `--token-env` names, never from the command line, and
is never printed. list asks the running bridge (3 s at most) and shows `(token set)`.
"""

from __future__ import annotations

import os
import sys

from collie.crew import control
from collie.crew.cli.restart import restart_after_change
from collie.crew.cli.status import bridge_down
from collie.crew.config import load_env, programs_off, single_agent
from collie.crew.errors import EXIT_USAGE, CollieError, NotRunningError, UsageError
from collie.crew.logs import printable
from collie.crew.security import check_socket_private, check_token, check_url, mask_url
from collie.crew.sources import NAME_RULE, RESERVED_NAME, Source, read_sources, remove, upsert
from collie.crew.views import STATUS_LABEL

LIST_TIMEOUT = 3.0


def register(sub) -> None:
    p = sub.add_parser("durable", help="attach, detach and list durable agents",
                       description="Attach, detach and list durable agents (sources.json).")
    verbs = p.add_subparsers(dest="durable_verb", metavar="VERB")
    verbs.required = True

    a = verbs.add_parser("attach", help="attach a durable agent by socket or URL",
                         usage="collie durable attach <name> --socket <path> [--restart]\n"
                               "       collie durable attach <name> --url <url> --token-env <VAR> [--restart]")
    a.add_argument("name")
    how = a.add_mutually_exclusive_group(required=True)
    how.add_argument("--socket", metavar="PATH", help="absolute path of the agent's Unix socket")
    how.add_argument("--url", metavar="URL", help="https:// URL (or http://127.0.0.1:<port>)")
    a.add_argument("--token-env", metavar="VAR", help="name of the environment variable holding the token")
    a.add_argument("--restart", action="store_true", help="restart the bridge afterwards")
    a.set_defaults(run=attach, parser=a)

    d = verbs.add_parser("detach", help="remove a durable agent")
    d.add_argument("name")
    d.add_argument("--restart", action="store_true", help="restart the bridge afterwards")
    d.set_defaults(run=detach)

    ls = verbs.add_parser("list", help="list attached agents and their status")
    ls.set_defaults(run=list_agents)


def _usage(args, text: str) -> int:
    args.parser.print_usage(sys.stderr)
    print(f"collie durable attach: error: {text}", file=sys.stderr)
    return EXIT_USAGE


def attach(args, paths) -> int:
    name = args.name
    if not NAME_RULE.match(name):
        raise UsageError(f"{name!r} breaks the name rule: 1-32 of a-z, 0-9 and '-', starting with a letter or digit")
    if name == RESERVED_NAME:
        raise UsageError(f'"{RESERVED_NAME}" is the main session\'s name; pick another name')
    notes = []
    if args.socket is not None:
        if sys.platform == "win32":
            return _usage(args, "--socket is not available on Windows; use --url and --token-env")
        if args.token_env:
            return _usage(args, "--token-env goes with --url; a socket carries no token")
        problem = check_socket_private(args.socket, must_exist=False)
        if problem:
            raise UsageError(f"not attached: {problem}")
        other = _attached_as(paths, args.socket, name)
        if other:
            raise UsageError(f"not attached: {args.socket} is already attached as \"{other}\"; one agent under two "
                             f"names would show twice (detach \"{other}\" first, or keep that name)")
        if not os.path.exists(args.socket):
            notes.append(f"note: {args.socket} does not exist yet; start the agent before the bridge reaches it")
        source = Source(name=name, kind="durable", socket=args.socket)
    else:
        if not args.token_env:
            return _usage(args, "--url needs --token-env <VAR> (the token is never given on the command line)")
        problem = check_url(args.url) or check_token(os.environ.get(args.token_env), args.token_env)
        if problem:
            raise UsageError(f"not attached: {problem}")
        source = Source(name=name, kind="durable", url=args.url, token=os.environ[args.token_env])
    replaced = upsert(paths.sources, source)
    print(f"{'updated' if replaced else 'attached'} {name}")
    print(f"wrote {paths.sources}")
    for note in notes:
        print(note)
    return _maybe_restart(args, paths)


def _attached_as(paths, socket_path: str, name: str) -> str | None:
    """The other entry that already reaches the same socket file (by path, or by inode when it exists)."""
    def same(other: str) -> bool:
        if os.path.normpath(other) == os.path.normpath(socket_path):
            return True
        try:
            return os.path.samefile(other, socket_path)
        except OSError:
            return False

    env = load_env(paths)
    default = single_agent(env)
    taken = [(s.name, s.socket) for s in read_sources(paths.sources) if s.socket]
    if default is not None and default.socket:
        taken.append((RESERVED_NAME, default.socket))
    return next((n for n, sock in taken if n != name and same(sock)), None)


def detach(args, paths) -> int:
    if not remove(paths.sources, args.name):
        raise CollieError(f"no durable agent named {args.name!r} in {paths.sources}")
    print(f"detached {args.name}")
    print(f"wrote {paths.sources}")
    return _maybe_restart(args, paths)


def _maybe_restart(args, paths) -> int:
    return restart_after_change(args, paths)


def list_agents(_args, paths) -> int:
    env = load_env(paths)
    off = programs_off(env)
    sources = read_sources(paths.sources)
    default = single_agent(env)
    try:
        reply = control.call(paths.control_socket, "agents", timeout=LIST_TIMEOUT)
        live = {a["name"]: a for a in reply["agents"]}
        bridge_note = None
    except NotRunningError as exc:
        live, bridge_note = None, bridge_down(exc)
    if off:
        print("durable agents are off (COLLIE_PROGRAMS=off in .env): sources.json is ignored")
    rows = []
    entries = ([("default", default.transport, default.address, bool(default.token))] if default else [])
    entries += [(s.name, s.transport, s.address, bool(s.token)) for s in sources]
    for name, transport, address, token_set in entries:
        where = printable(mask_url(address)) + ("  (token set)" if token_set else "")
        if off and name != RESERVED_NAME:
            state = "off"
        elif live is None:
            state = "bridge not running"
        elif name not in live:
            state = "not loaded: run `collie restart`"
        else:
            state = printable(_describe(live[name]))  # the agent chose its runtime and detail: escape (9.5)
        rows.append((name, transport, where, state))
    if not rows:
        print(f"no durable agents attached ({paths.sources})")
    else:
        widths = [max(len(r[i]) for r in rows + [("NAME", "VIA", "ADDRESS", "STATUS")]) for i in range(3)]
        for r in [("NAME", "VIA", "ADDRESS", "STATUS")] + rows:
            print("  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3])
    if bridge_note and rows:
        print(f"(statuses are unknown: the bridge is {bridge_note})" if bridge_note.startswith("not running")
              else f"(statuses are unknown: {bridge_note})")
    return 0


def _describe(agent: dict) -> str:
    label = STATUS_LABEL.get(agent["status"], agent["status"])
    if agent["status"] == "ready":
        parts = [agent.get("runtime") or "durable", "local" if agent["local"] else "remote",
                 f"{agent['open_count']} open"]
        if agent.get("waiting_count"):
            parts.append(f"{agent['waiting_count']} waiting for you")
        return f"{label}: " + ", ".join(parts)
    if agent.get("reason"):
        return f"{label}: {agent['reason']}" + (f" ({agent['detail']})" if agent.get("detail") else "")
    return label

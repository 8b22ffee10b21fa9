"""`collie doctor`: one line per check; every failing line says what to do (features V3).

Marks: ``ok``, ``warn`` (works, but look), ``FAIL`` (broken; the line says the fix). Exit status 1
when any check fails. When the bridge runs, agent lines come from its live status; otherwise the
doctor judges what it can from here (path privacy, stale socket, URL and token rules).
"""

from __future__ import annotations

import os
import socket
import stat

from collie.crew import control
from collie.crew.cli.status import bridge_down, crew_members
from collie.crew.config import AgentConfig, load_env, programs_off, single_agent
from collie.crew.crewconfig import read_crew
from collie.crew.errors import CollieError, ConfigError, NotRunningError
from collie.crew.logs import printable
from collie.crew.security import check_socket_private, check_token, check_url
from collie.crew.sources import check_config_dir, read_sources
from collie.crew.wire import WireRange, doctor_mismatch

ADVICE = {  # what to do; the reason's own text says what is wrong (and, for socket-not-private, the fix)
    "connection-refused": "if the agent crashed, remove the stale socket and start the agent",
    "unauthorized": "the agent refused the token: give the agent the new token, re-run `collie durable attach` with the same name, then `collie restart`",
    "version": "update Collie, or the agent's SDK",
    "timeout": "the agent did not answer in time: check that it runs and is not overloaded",
    "config": "fix .env and run `collie restart`",
}


class Report:
    def __init__(self) -> None:
        self.failed = False

    def line(self, mark: str, check: str, text: str) -> None:
        if mark == "FAIL":
            self.failed = True
        print(printable(f"{mark:<4} {check}: {text}"))  # agents and members chose some of it (9.5)


def register(sub) -> None:
    p = sub.add_parser("doctor", help="check the config, the bridge and every agent; say what to fix")
    p.set_defaults(run=run)


def _probe_socket(path: str) -> str | None:
    """T8: a socket file nobody listens on gives `connection refused`."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(path)
    except ConnectionRefusedError:
        return "connection-refused"
    except OSError as exc:
        return f"cannot connect ({exc.strerror or exc})"
    finally:
        s.close()
    return None


def _offline_agent(report: Report, agent: AgentConfig) -> None:
    check = f"agent {agent.name}"
    problem = agent.problem
    if problem is None and agent.socket:
        problem = check_socket_private(agent.socket)
        if problem is None:
            probe = _probe_socket(agent.socket)
            if probe == "connection-refused":
                report.line("FAIL", check, f"connection refused at {agent.socket}: remove the stale socket "
                                           f"(rm {agent.socket}) and start the agent")
                return
            if probe:
                report.line("FAIL", check, f"{agent.socket}: {probe}")
                return
    elif problem is None and agent.url:
        problem = check_url(agent.url) or check_token(agent.token, f'the token of "{agent.name}"')
    if problem:
        report.line("FAIL", check, with_advice(str(problem), problem.code))
    else:
        report.line("ok", check, f"{agent.address} passes the local checks (the bridge is not running to reach it)")


def with_advice(text: str, reason: str | None) -> str:
    """`text`, then the advice for `reason` unless the text already gives it (no phrase twice)."""
    advice = ADVICE.get(reason or "", "")
    return text + (f"; {advice}" if advice and advice[:24] not in text else "")


def _hello_line(report: Report, name: str, st: dict) -> None:
    """W2, V3: what the agent said in hello, with both ranges when they do not overlap."""
    check = f"durable-hello {name}"
    if st["status"] == "version_mismatch" and st.get("wire"):
        theirs = WireRange(*map(int, st["wire"].split("..")))
        report.line("FAIL", check, f"{doctor_mismatch(theirs)}; update Collie, or the agent's SDK")
    elif st.get("wire") and st.get("instance"):
        report.line("ok", check, f"wire {st['wire']} ({st.get('runtime') or 'durable'}, caps: "
                                 f"{', '.join(st.get('caps') or []) or 'none'})")


def _same_sockets(sources, default) -> list[tuple[str, str]]:
    """Pairs of names whose sockets are the same path (hand-written duplicates; attach refuses them)."""
    seen: dict[str, str] = {}
    pairs = []
    named = ([(default.name, default.socket)] if default is not None and default.socket else [])
    named += [(s.name, s.socket) for s in sources if s.socket]
    for name, sock in named:
        key = os.path.normpath(sock)
        if key in seen:
            pairs.append((seen[key], name))
        else:
            seen[key] = name
    return pairs


def run(_args, paths) -> int:
    report = Report()
    # config
    try:
        check_config_dir(paths.config_dir)
    except ConfigError as exc:
        report.line("FAIL", "config", f"{exc} (the bridge will not start until then)")
    try:
        env = load_env(paths)
    except ConfigError as exc:
        report.line("FAIL", "config", str(exc))
        env = {}
    off = programs_off(env)
    agents: list[AgentConfig] = []
    default = single_agent(env)
    if default is not None:
        agents.append(default)
    sources_broken = False
    try:
        sources = read_sources(paths.sources)
    except ConfigError as exc:
        report.line("FAIL", "config", f"{exc}; fix the file before `collie restart` (a restart refuses it, a start "
                                      "stops on it)")
        sources, sources_broken = [], True
    else:
        try:
            mode = stat.S_IMODE(os.stat(paths.sources).st_mode)
        except FileNotFoundError:
            report.line("ok", "config", f"no sources.json at {paths.sources} (attach one with `collie durable attach`)")
        else:
            if mode != 0o600:
                report.line("warn", "config", f"{paths.sources} has mode {mode:04o}; it holds tokens: chmod 600 it "
                                              "(the bridge tightens it at start)")
            else:
                report.line("ok", "config", f"{paths.sources}: {len(sources)} entr{'y' if len(sources) == 1 else 'ies'}, mode 0600")
    for other in (paths.dotenv, paths.crew):
        try:
            omode = stat.S_IMODE(os.lstat(other).st_mode)
        except FileNotFoundError:
            continue
        if omode != 0o600:
            report.line("warn", "config", f"{other} has mode {omode:04o}; it can hold a token: chmod 600 it "
                                          "(the bridge tightens it at start)")
    try:
        read_crew(paths.crew)
    except ConfigError as exc:
        report.line("FAIL", "config", str(exc))
    for first, second in _same_sockets(sources, default):
        report.line("warn", "config", f'"{second}" reaches the same socket as "{first}": the agent shows twice; '
                                      f'`collie durable detach {second}`')
    if off:
        report.line("warn", "durable", "durable agents are off (COLLIE_PROGRAMS=off in .env); remove it and "
                                       "`collie restart` to turn them on")
    else:
        agents += [AgentConfig.from_source(s) for s in sources]
    # state folder
    try:
        smode = stat.S_IMODE(os.stat(paths.state_dir).st_mode)
        if smode != 0o700:
            report.line("FAIL", "state", f"{paths.state_dir} has mode {smode:04o}; chmod 700 it")
        else:
            report.line("ok", "state", f"{paths.state_dir} (0700)")
    except FileNotFoundError:
        report.line("ok", "state", f"{paths.state_dir} does not exist yet (the bridge creates it)")
    # bridge
    try:
        pong = control.call(paths.control_socket, "ping")
        live = {a["name"]: a for a in control.call(paths.control_socket, "agents")["agents"]}
        where = (f"a member of the lead at {pong.get('address') or '?'} (the link: see crew below)" if pong.get("role") == "member"
                 else f"phone API on {pong.get('address') or '?'}")
        report.line("ok", "bridge", f"running (pid {pong['pid']}), {where}")
    except NotRunningError as exc:
        live = None
        report.line("FAIL", "bridge", bridge_down(exc))
    # agents
    for agent in agents:
        if live is None:
            _offline_agent(report, agent)
            continue
        st = live.get(agent.name)
        check = f"agent {agent.name}"
        if st is not None:
            _hello_line(report, agent.name, st)
        if st is None:
            report.line("FAIL", check, "entry not loaded: run `collie restart`")
        elif st["status"] == "ready":
            report.line("ok", check, f"ready ({st.get('runtime') or 'durable'}, {st['open_count']} open)")
        elif st["status"] == "version_mismatch":
            continue  # the durable-hello line says it all
        elif st["status"] == "starting":
            report.line("warn", check, "starting: the bridge has not reached it yet; run the doctor again in a few seconds")
        else:
            text = f"{st['status']}: {st.get('reason')}" + (f" ({st['detail']})" if st.get("detail") else "")
            report.line("FAIL", check, with_advice(text, st.get("reason")))
    if live is not None and pong.get("role") == "member":
        link = control.call(paths.control_socket, "link")
        if link["connected"]:
            report.line("ok", "crew", f"member {link['label']}, connected to {link['lead']}")
        else:
            report.line("FAIL", "crew", f"member {link['label']}, not connected to {link['lead']}: "
                                        f"{link.get('last_error') or 'connecting'}; check the lead runs and the token "
                                        "(a new invite: `collie crew join … --restart`)")
    elif live is not None and pong.get("role") == "lead":
        try:
            phone = control.call(paths.control_socket, "live")
        except CollieError:  # a lead from before pairing existed
            phone = {"devices": 0, "channels": 0}
        served = phone.get("served")
        if phone.get("public_url"):
            report.line("ok", "reach", f"phones open {phone['public_url']} (the proxy or tunnel in front of the lead "
                                       f"forwards to {phone.get('address')})")
        if served and phone.get("own_authority"):
            report.line("ok", "tls", f"{phone.get('address')}: serving a certificate for {', '.join(served['names'])} "
                                     f"(until {served['until']}), issued by the lead's own authority \"{served['issuer']}\""
                                     f" SHA-256 {phone['authority_fingerprint']}; phones trust it once at "
                                     f"{(phone.get('urls') or [phone.get('address')])[0]}/trust")
        elif served:
            issuer = "self-signed" if served["self_signed"] else f"issued by \"{served['issuer']}\""
            report.line("ok", "tls", f"{phone.get('address')}: serving your certificate (--tls-cert) for "
                                     f"{', '.join(served['names']) or 'no names'} (until {served['until']}), {issuer}, "
                                     f"SHA-256 {served['fingerprint']}")
        elif phone.get("fingerprint"):
            report.line("ok", "tls", f"{phone.get('address')}: certificate SHA-256 {phone['fingerprint']}")
        elif phone.get("address"):
            report.line("ok", "tls", f"plain HTTP on loopback ({phone.get('address')}); phones on the network need "
                                     "`collie serve --host 0.0.0.0` (TLS), phones anywhere `--public-url` "
                                     "behind a proxy or tunnel (docs/remote.md)")
        report.line("ok", "phones", f"{phone['devices']} paired, {phone['channels']} live channel"
                                    f"{'' if phone['channels'] == 1 else 's'} open (`collie devices`)")
        members = crew_members(paths)
        if members:
            offline = [m["label"] for m in members if not m["online"]]
            report.line("warn" if offline else "ok", "crew",
                        f"lead, {len(members) - len(offline)} of {len(members)} member"
                        f"{'' if len(members) == 1 else 's'} online"
                        + (f" (offline: {', '.join(offline)}; one that left for good: `collie crew remove LABEL`)"
                           if offline else ""))
    if live is not None:
        program = control.call(paths.control_socket, "program")
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(program["outcomes"].items())) or "no writes yet"
        report.line("ok", "program", f"{program['reads']} reads; writes: {outcomes}")
    for name in sorted(set(live or {}) - {a.name for a in agents}):
        if sources_broken:  # not "no longer configured": the file could not be read (issue 10.2)
            report.line("warn", f"agent {name}", "loaded by the bridge; sources.json cannot be read (see above)")
        else:
            report.line("warn", f"agent {name}", "loaded by the bridge but no longer configured: run `collie restart`")
    return 1 if report.failed else 0

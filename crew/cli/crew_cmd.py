"""`collie crew join|leave|invite|list|remove` (features V4, crew.md §1).

join/leave write or remove crew.json (0600) and restart nothing unless `--restart`. invite makes a
fresh member token (32 random bytes), stores only its hash on the lead, and writes the token to a
0600 file whose path it prints — the token itself is never printed. The running lead deletes that
file as soon as the member first connects, so only the hash stays (crew.md §1).
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import sqlite3
import time

from collie.crew import control, crewwire
from collie.crew.cli.restart import restart_after_change
from collie.crew.cli.serve import DEFAULT_HOST, DEFAULT_PORT, serve_env
from collie.crew.cli.status import crew_members
from collie.crew.crewconfig import CrewConfig, check_fingerprint, check_lead_address, read_crew, remove_crew, write_crew
from collie.crew.crewstore import CrewStore
from collie.crew.errors import CollieError, NotRunningError, UsageError
from collie.crew.fsutil import atomic_write, ensure_private_dir
from collie.crew.logs import printable
from collie.crew.security import check_token, fingerprint_file
from collie.crew.sources import NAME_RULE


def register(sub) -> None:
    p = sub.add_parser("crew", help="join a lead, or manage this lead's members")
    verbs = p.add_subparsers(dest="crew_verb", metavar="VERB")
    verbs.required = True
    j = verbs.add_parser("join", help="make this machine a member of a lead's crew")
    j.add_argument("lead", help="the lead's address: wss://host:port (or ws://127.0.0.1:port on this machine)")
    j.add_argument("--token-env", required=True, metavar="VAR",
                   help="name of the variable holding this machine's member token (from `collie crew invite` on the "
                        "lead); the token is never given on the command line")
    j.add_argument("--ca-sha256", metavar="SHA256",
                   help="the SHA-256 of the lead's own certificate authority, as `collie crew invite` prints it: "
                        "this member trusts it for this lead (besides the system's authorities)")
    j.add_argument("--label", help="this machine's name in the crew (default: the host name)")
    j.add_argument("--restart", action="store_true", help="restart the running bridge so it joins now")
    j.set_defaults(run=join)
    lv = verbs.add_parser("leave", help="stop being a member (this machine leads again)")
    lv.add_argument("--restart", action="store_true", help="restart the running bridge so it leads now")
    lv.set_defaults(run=leave)
    i = verbs.add_parser("invite", help="make a member token and print the join command")
    i.add_argument("--label", help="the member's name (default: member-<random>)")
    i.set_defaults(run=invite)
    ls = verbs.add_parser("list", help="members: online or not, last seen, version")
    ls.set_defaults(run=list_members)
    rm = verbs.add_parser("remove", help="revoke members: by label, or every one offline now",
                          description="Revoke members: their tokens no longer open the link, an open link is "
                                      "closed, and they leave the dashboard. Nothing is removed when a label is unknown.")
    rm.add_argument("labels", nargs="*", metavar="LABEL", help="the members to revoke")
    rm.add_argument("--offline", action="store_true",
                    help="also every member that is offline or never joined (asks the running lead)")
    rm.set_defaults(run=remove)


def default_label() -> str:
    host = re.sub(r"[^a-z0-9-]+", "-", socket.gethostname().lower()).strip("-")[:32]
    return host if NAME_RULE.match(host or "") else "member"


def _label(label: str) -> str:
    if not NAME_RULE.match(label):
        raise UsageError(f"{label!r} breaks the name rule: 1-32 of a-z, 0-9 and '-', starting with a letter or digit")
    if label == "local":
        raise UsageError('"local" names the lead\'s own machine; pick another label')
    return label


def _restart(args, paths) -> int:
    return restart_after_change(args, paths)


def join(args, paths) -> int:
    url = crewwire.ws_url(args.lead)
    problem = check_lead_address(url)
    if problem:
        raise UsageError(f"not joined: {problem.text}")
    token = os.environ.get(args.token_env)
    problem = check_token(token, args.token_env, "the member token (from `collie crew invite` on the lead)")
    if problem:
        raise UsageError(f"not joined: {problem.text}")
    label = _label(args.label or default_label())
    pin = None
    if args.ca_sha256:
        try:
            pin = check_fingerprint(args.ca_sha256)
        except ValueError as exc:
            raise UsageError(f"not joined: --ca-sha256: {exc}") from None
        if not url.startswith("wss://"):
            raise UsageError("not joined: --ca-sha256 is for a wss:// lead (a ws:// lead on this machine has no TLS)")
    write_crew(paths.crew, CrewConfig(version=1, lead=url, token=token, label=label, ca_sha256=pin))
    print(f"joined {url} as {label}")
    print(f"wrote {paths.crew}")
    return _restart(args, paths)


def leave(args, paths) -> int:
    cfg = read_crew(paths.crew)
    if not remove_crew(paths.crew):
        raise CollieError("this machine is not a member of a crew")
    print(f"left {cfg.lead if cfg else 'the crew'}; this machine leads again")
    return _restart(args, paths)


def _store(paths) -> CrewStore:
    ensure_private_dir(paths.state_dir)
    return CrewStore(paths.state_dir / "crew.sqlite")


def _lead_address(paths) -> tuple[str, str | None]:
    """(the running lead's address as a member dials it, its authority's fingerprint): its public URL, else its
    own address (never 0.0.0.0 or ::). With none running, the one `collie serve` would take (COLLIE_HOST/PORT)."""
    try:
        pong = control.call(paths.control_socket, "ping", timeout=1)
        address, authority = pong.get("public_url") or pong["address"], pong.get("authority")
    except NotRunningError:
        env = serve_env(paths)
        address = (env.get("COLLIE_PUBLIC_URL") or "").strip()
        if not address:
            host = env.get("COLLIE_HOST") or DEFAULT_HOST
            if host in ("0.0.0.0", "::"):
                host = socket.gethostname()
            port = (env.get("COLLIE_PORT") or "").strip() or str(DEFAULT_PORT)
            address = f"http://{f'[{host}]' if ':' in host else host}:{port}"
        authority = fingerprint_file(paths.state_dir / "tls" / "ca.pem")
    return crewwire.ws_url(address), authority


def invite(args, paths) -> int:
    if paths.crew.exists():
        raise CollieError("this machine is a member, not a lead: invite from the lead")
    label = _label(args.label or f"member-{secrets.token_hex(2)}")
    token = secrets.token_hex(32)
    store = _store(paths)
    try:
        store.invite(label, token)
    except sqlite3.IntegrityError:
        raise CollieError(f"{label!r} is already a member: remove it first, or pick another label") from None
    finally:
        store.close()
    folder = paths.state_dir / "invites"
    ensure_private_dir(folder)
    token_file = folder / f"{label}.token"
    atomic_write(token_file, (token + "\n").encode(), mode=0o600)
    url, authority = _lead_address(paths)
    pin = f" --ca-sha256 {authority}" if authority and url.startswith("wss://") else ""
    print(f"invited {label}. Its member token is in {token_file} (0600); it is not printed.")
    print("Copy that file to the member machine (e.g. with scp); the lead deletes it once the member joined.")
    print("Then run there:")
    print(f"  export COLLIE_CREW_TOKEN=\"$(cat {label}.token)\"")
    print(f"  collie crew join {url}{pin} --token-env COLLIE_CREW_TOKEN --label {label} --restart")
    if pin:
        print("(--ca-sha256 is the lead's own certificate authority: the member trusts it for this lead only, "
              "besides the system's)")
    if url.startswith("ws://"):
        print("(this lead listens on loopback only: members on other machines need `collie serve --host 0.0.0.0` "
              "(TLS from the lead's own authority) and a wss:// address)")
    return 0


def _when(wall: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(wall)) if wall else "never"


def list_members(_args, paths) -> int:
    cfg = read_crew(paths.crew) if paths.crew.exists() else None
    if cfg is not None:
        print(printable(f"this machine is the member {cfg.label} of {cfg.lead}: members are listed on the lead "
                        "(`collie crew list` there)"))
        return 0
    try:
        live = control.call(paths.control_socket, "crew", timeout=3)["members"]
    except CollieError:
        live = None
    members = crew_members(paths, live or [])
    if not members:
        print("no members (invite one with `collie crew invite --label NAME`)")
        return 0
    rows = [("LABEL", "STATE", "LAST SEEN", "COLLIE", "AGENTS")]
    for m in members:
        if live is None:
            state = "unknown (the lead is not running)"
        elif m["online"]:
            state = "online" + (" (read-only: older Collie)" if m["read_only"] else "")
        else:
            since = m.get("offline_since") or m["last_seen"]
            state = f"offline since {_when(since)}" if since else "never connected"
        rows.append((m["label"], state, _when(m["last_seen"]), m["version"] or "?",
                     str(m["agents"]) if live is not None else "?"))
    widths = [max(len(printable(r[i])) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(printable(c).ljust(w) for c, w in zip(r[:4], widths)) + "  " + printable(r[4]))
    if live is not None and any(not m["online"] for m in members):
        print("(a member that left for good stays offline here: `collie crew remove LABEL` revokes it)")
    return 0


def remove(args, paths) -> int:
    """Revoke every label named (all or none: an unknown label removes nothing), and with `--offline` every
    member the running lead does not see online; one store, one pass (20 labels cost one start, not 20)."""
    labels = list(dict.fromkeys(args.labels))
    if not labels and not args.offline:
        raise UsageError("name the members to remove (`collie crew remove LABEL …`), or give --offline")
    live = None
    if args.offline:
        try:
            live = control.call(paths.control_socket, "crew", timeout=3)["members"]
        except NotRunningError:
            raise CollieError("--offline asks the running lead which members are online: start it "
                              "(`collie serve`), or name the labels") from None
    store = _store(paths)
    try:
        known = [m["label"] for m in crew_members(paths, live or [])]
        unknown = [label for label in labels if label not in known]
        if unknown:
            raise CollieError(f"no member named {', '.join(repr(u) for u in unknown)}: nothing removed "
                              "(`collie crew list` shows the members)")
        if live is not None:
            online = {m["label"] for m in live if m.get("online")}
            labels += [label for label in known if label not in online and label not in labels]
        for label in labels:
            store.remove(label)
    finally:
        store.close()
    if not labels:
        print("no member is offline: nothing removed")
        return 0
    for label in labels:
        try:
            control.call(paths.control_socket, "crew_remove", label=label)
        except NotRunningError:
            pass
        (paths.state_dir / "invites" / f"{label}.token").unlink(missing_ok=True)
    if len(labels) == 1:
        print(f"removed {labels[0]}: its token no longer opens the link")
    else:
        print(printable(f"removed {len(labels)} members ({', '.join(labels)}): their tokens no longer open the link"))
    return 0

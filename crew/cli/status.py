"""`collie status`: this machine's role, whether the bridge runs, and its agents at a glance (I11).

Every value a peer chose (a member's label or version, the lead's error text) is printed through
`printable`, so it cannot draw on the terminal or fake a line (issue 9.5).
"""

from __future__ import annotations

import time
from collections import Counter

from collie.crew import control
from collie.crew.crewstore import CrewStore
from collie.crew.errors import CollieError, NotRunningError
from collie.crew.logs import printable


def register(sub) -> None:
    p = sub.add_parser("status", help="is the bridge running, what role, which agents")
    p.set_defaults(run=run)


def _ago(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def crew_members(paths, live: list[dict] | None = None) -> list[dict]:
    """Every invited member (the lead's records), with what the running lead knows of each.

    The records are the truth of who is invited: the running lead's list misses members invited
    after it started until they connect (issue 10.5).
    """
    if live is None:
        try:
            live = control.call(paths.control_socket, "crew", timeout=3)["members"]
        except CollieError:
            live = []
    by_label = {m["label"]: m for m in live}
    db = paths.state_dir / "crew.sqlite"
    rows = []
    if db.exists():
        store = CrewStore(db)
        try:
            rows = store.members()
        finally:
            store.close()
    out = []
    for row in rows:
        m = by_label.get(row["label"], {})
        out.append({**row, "online": bool(m.get("online")), "read_only": bool(m.get("read_only")),
                    "version": m.get("version") or row["version"], "last_seen": m.get("last_seen") or row["last_seen"],
                    "offline_since": m.get("offline_since"), "agents": m.get("agents", 0)})
    return out


def bridge_down(exc: NotRunningError) -> str:
    """One phrase for a bridge that does not answer, each fact said once (issue 10.5)."""
    text = str(exc)
    if text.startswith("no bridge is running"):
        return "not running (start it with `collie serve`)"
    return text.removeprefix("the bridge ").removeprefix("cannot reach the bridge: ") + " (see `collie logs`)"


def say(text: str) -> None:
    print(printable(text))


def run(_args, paths) -> int:
    role = "member" if paths.crew.exists() else "lead"
    say(f"role: {role}" + ("" if role == "member" else " (members join it; alone it leads itself)"))
    try:
        pong = control.call(paths.control_socket, "ping")
        agents = control.call(paths.control_socket, "agents")
    except NotRunningError as exc:
        say(f"bridge: {bridge_down(exc)}")
        return 1
    say(f"bridge: running, pid {pong['pid']}, Collie {pong['collie']}, up {_ago(time.time() - pong['started'])}")
    if pong.get("role") != "member":  # a member serves no phone: its address is the link's (crew line below)
        say(f"phone API: {pong.get('address') or 'not bound'}")
    if agents.get("programs_off"):
        say("durable agents: off (COLLIE_PROGRAMS=off in .env)")
    counts = Counter(a["status"] for a in agents["agents"])
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none attached"
    polled = [a["polled_ago"] for a in agents["agents"] if a.get("polled_ago") is not None]
    last = f", last polled {_ago(min(polled))} ago" if polled else (", none reached yet" if agents["agents"] else "")
    say(f"durable agents: {len(agents['agents'])} ({summary}){last}")
    if pong.get("role") == "member":
        link = control.call(paths.control_socket, "link")
        state = "connected" if link["connected"] else "not connected"
        since = f" since {time.strftime('%H:%M', time.localtime(link['since']))}" if link.get("since") else ""
        contact = (f", last contact {_ago(time.time() - link['last_contact'])} ago" if link.get("last_contact")
                   else ", never in contact")
        say(f"crew: member {link['label']} of {link['lead']}: {state}{since}{contact}")
        if link.get("last_error") and not link["connected"]:
            say(f"crew: {link['last_error']}")
    elif pong.get("role") == "lead":
        members = crew_members(paths)
        online = sum(1 for m in members if m["online"])
        say(f"crew: lead, {online} of {len(members)} member{'' if len(members) == 1 else 's'} online")
    return 0

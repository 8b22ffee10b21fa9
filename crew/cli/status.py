"""`collie status`: this machine's role, whether the bridge runs, and its agents at a glance (I11)."""

from __future__ import annotations

import time
from collections import Counter

from crew import control
from crew.errors import NotRunningError


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


def run(_args, paths) -> int:
    role = "member" if paths.crew.exists() else "lead"
    print(f"role: {role}" + ("" if role == "member" else " (members join it; alone it leads itself)"))
    try:
        pong = control.call(paths.control_socket, "ping")
        agents = control.call(paths.control_socket, "agents")
    except NotRunningError as exc:
        print(f"bridge: not running ({exc})")
        return 1
    print(f"bridge: running, pid {pong['pid']}, Collie {pong['collie']}, up {_ago(time.time() - pong['started'])}")
    print(f"phone API: {pong.get('address') or 'not bound'}")
    if agents.get("programs_off"):
        print("durable agents: off (COLLIE_PROGRAMS=off in .env)")
    counts = Counter(a["status"] for a in agents["agents"])
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none attached"
    print(f"durable agents: {len(agents['agents'])} ({summary})")
    if pong.get("role") == "member":
        link = control.call(paths.control_socket, "link")
        state = "connected" if link["connected"] else "not connected"
        since = f" since {time.strftime('%H:%M', time.localtime(link['since']))}" if link.get("since") else ""
        contact = (f", last contact {_ago(time.time() - link['last_contact'])} ago" if link.get("last_contact")
                   else ", never in contact")
        print(f"crew: member {link['label']} of {link['lead']}: {state}{since}{contact}")
        if link.get("last_error") and not link["connected"]:
            print(f"crew: {link['last_error']}")
    elif pong.get("role") == "lead":
        members = control.call(paths.control_socket, "crew")["members"]
        online = sum(1 for m in members if m["online"])
        print(f"crew: lead, {online} of {len(members)} member{'' if len(members) == 1 else 's'} online")
    return 0

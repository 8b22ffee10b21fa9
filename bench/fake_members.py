"""A lab of fake members on one lead (issue 28): `python -m collie.fixtures member --count 100 --agents 10
--conversations 100` in one process against one real lead (docs/testing.md).

    .venv/bin/python bench/fake_members.py [--quick] [--count 100] [--agents 10] [--conversations 100]
                                           [--seconds 15]

Measured, with CPU time and RSS from /proc:

- join: from the fake-member process's start until the lead lists every member online with all its
  agents (and the process's own `all N members joined` line);
- the lead idle (beats only) and busy (every member changes one conversation a second: `--churn 1`,
  one `agent` frame of the whole agent view each), `--seconds` each: CPU (share of one core) and RSS;
- the fake-member process itself: RSS after the join (and its peak), CPU idle and busy.

Floors, from the same run: the lead with no member (CPU, RSS); one fake member of one agent with one
conversation (its join time, and the process's RSS: Python, trio and the crew link alone); an httpx
round trip over loopback to a trivial server on the lead's stack (bench/measure.py). The load average
is printed before and after. `run(quick=...)` returns the figures (python -m bench).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import Floor, cpu_seconds, loadavg, rss_mib  # noqa: E402

from collie.fixtures.pytest_plugin import Lead, _private_dir  # noqa: E402

FULL = {"count": 100, "agents": 10, "conversations": 100, "seconds": 15.0}
QUICK = {"count": 10, "agents": 2, "conversations": 10, "seconds": 3.0}
JOIN_TIMEOUT = 300.0


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_share(pid: int, seconds: float) -> float:
    """The share of one core `pid` used over `seconds` of wall time."""
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - c0) / (time.monotonic() - t0)


def fake_process(lead: Lead, label: str, count: int, agents: int, conversations: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "collie.fixtures", "member", "--lead", lead.url, "--invite", "--label", label,
                             "--count", str(count), "--agents", str(agents), "--conversations", str(conversations),
                             *extra], cwd=REPO, env={**lead.env, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def all_online(lead: Lead, prefix: str, count: int, agents: int) -> bool:
    ms = [m for m in lead.members() if m["label"].startswith(prefix + "-")]
    return len(ms) == count and all(m["online"] and m["agents"] == agents for m in ms)


def wait_joined(lead: Lead, proc: subprocess.Popen, prefix: str, count: int, agents: int) -> tuple[float, float]:
    """(seconds until the lead shows all online, seconds the process said its last member joined)."""
    t0 = time.monotonic()
    said = None
    while said is None:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the fake-member process exited {proc.poll()}")
        if line.startswith("all ") or (count == 1 and line.startswith("joined ")):
            said = float(line.rsplit("(", 1)[1].split(" s)")[0])
    lead.wait_for(lambda: all_online(lead, prefix, count, agents), JOIN_TIMEOUT, "every fake member online on the lead")
    return time.monotonic() - t0, said


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out


def run(quick: bool = False, **sizes) -> dict:
    o = {**(QUICK if quick else FULL), **{k: v for k, v in sizes.items() if v is not None}}
    load_before = os.getloadavg()
    floor = Floor()
    try:
        http = trio.run(floor.measure, 100 if quick else 300)
    finally:
        floor.close()
    home = _private_dir("bench-fake-members-")
    lead = Lead(home)
    lead.start()
    procs: list[subprocess.Popen] = []
    try:
        pid = lead.process.pid
        time.sleep(1.0)
        lead_floor = {"cpu": cpu_share(pid, min(5.0, o["seconds"])), "rss_mib": rss_mib(pid)}
        # the floor member: one agent, one conversation
        one = fake_process(lead, "floor", 1, 1, 1)
        procs.append(one)
        one_join, _ = wait_joined(lead, one, "floor", 1, 1)
        time.sleep(0.5)
        one_rss = rss_mib(one.pid)
        stop(one)
        # the lab
        lab = fake_process(lead, "lab", o["count"], o["agents"], o["conversations"],
                           "--churn", "1", "--churn-after", str(o["seconds"] + 3))
        procs.append(lab)
        join_s, said_s = wait_joined(lead, lab, "lab", o["count"], o["agents"])
        t_joined = time.monotonic()
        fake_rss_joined = rss_mib(lab.pid)
        lab_cpu0 = cpu_seconds(lab.pid)
        idle_cpu = cpu_share(pid, o["seconds"])
        fake_idle_cpu = (cpu_seconds(lab.pid) - lab_cpu0) / (time.monotonic() - t_joined)
        idle_rss = rss_mib(pid)
        # the churn starts seconds + 3 after the process's last join; give it a second to ramp up
        time.sleep(max(0.0, t_joined + o["seconds"] + 3 + 1 - time.monotonic()))
        lab_cpu0, t_busy = cpu_seconds(lab.pid), time.monotonic()
        busy_cpu = cpu_share(pid, o["seconds"])
        fake_busy_cpu = (cpu_seconds(lab.pid) - lab_cpu0) / (time.monotonic() - t_busy)
        busy_rss = rss_mib(pid)
        fake_rss_busy, fake_peak = rss_mib(lab.pid), peak_rss_mib(lab.pid)
        lead_peak = peak_rss_mib(pid)
        summary = stop(lab).strip().splitlines()[-1]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        lead.close()
        import shutil
        shutil.rmtree(home, ignore_errors=True)
    return {"sizes": o, "quick": quick, "http_floor": http, "lead_floor": lead_floor,
            "one_member": {"join_s": one_join, "rss_mib": one_rss},
            "join_s": join_s, "process_said_s": said_s, "idle_cpu": idle_cpu, "idle_rss_mib": idle_rss,
            "busy_cpu": busy_cpu, "busy_rss_mib": busy_rss, "lead_peak_rss_mib": lead_peak,
            "changes_per_s": o["count"], "fake": {"rss_joined_mib": fake_rss_joined, "rss_busy_mib": fake_rss_busy,
                                                  "peak_rss_mib": fake_peak, "idle_cpu": fake_idle_cpu,
                                                  "busy_cpu": fake_busy_cpu},
            "summary": summary, "load_before": load_before, "load_after": os.getloadavg()}


def report(r: dict) -> str:
    o = r["sizes"]
    lf, one, fk = r["lead_floor"], r["one_member"], r["fake"]
    lab = f"{o['count']} members x {o['agents']} agents x {o['conversations']} conversations"
    lines = [
        f"fake members, one process: {lab} ({o['count'] * o['agents'] * o['conversations']:,} open conversations)",
        f"  floor: http round trip p50 {r['http_floor']['p50'] * 1000:.2f} ms; lead with no member: CPU "
        f"{lf['cpu'] * 100:.1f} %, RSS {lf['rss_mib']:.0f} MiB; one member (1 x 1): join {one['join_s']:.2f} s, "
        f"process RSS {one['rss_mib']:.0f} MiB",
        f"  join: every member online on the lead {r['join_s']:.2f} s (the process's last join line at "
        f"{r['process_said_s']:.2f} s)",
        f"  lead idle: CPU {r['idle_cpu'] * 100:.1f} % of a core, RSS {r['idle_rss_mib']:.0f} MiB",
        f"  lead busy ({r['changes_per_s']} changes/s, one per member): CPU {r['busy_cpu'] * 100:.1f} % of a core, "
        f"RSS {r['busy_rss_mib']:.0f} MiB (peak {r['lead_peak_rss_mib']:.0f} MiB)",
        f"  fake-member process: RSS {fk['rss_joined_mib']:.0f} MiB joined, {fk['rss_busy_mib']:.0f} MiB busy "
        f"(peak {fk['peak_rss_mib']:.0f} MiB); CPU idle {fk['idle_cpu'] * 100:.1f} %, busy {fk['busy_cpu'] * 100:.1f} %",
        f"  its summary: {r['summary']}",
        f"  {loadavg()} (before: {' '.join(f'{x:.2f}' for x in r['load_before'])})",
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--count", type=int)
    p.add_argument("--agents", type=int)
    p.add_argument("--conversations", type=int)
    p.add_argument("--seconds", type=float)
    p.add_argument("--json", help="also write the figures to this file")
    a = p.parse_args()
    r = run(a.quick, count=a.count, agents=a.agents, conversations=a.conversations, seconds=a.seconds)
    print(report(r))
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()

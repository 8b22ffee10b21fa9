"""Every benchmark, one table, one JSON file (issue 15.1).

    .venv/bin/python -m bench [--quick] [--json PATH] [--only NAME,...] [--timeout S]

Runs each benchmark below in a process of its own, one after another (each calls the benchmark
module's `suite(quick=...)` when it has one, else its `run(quick=...)`), then prints one table —
figure, value, floor, ratio, target, met? — and writes every figure and every benchmark's whole dict
to JSON (`--json`, default bench/results.json, or bench/results-quick.json with `--quick`).

    wire     bench/wire_idle.py     idle requests per agent per day and bytes per idle poll (polling vs
                                    watch, virtual time); ask -> the phone's pane route (one agent, 100
                                    open conversations)
    idle     bench/many_agents.py   one real bridge with 50 agents x 100 open conversations, idle (watch
                                    long-poll): its CPU per idle poll beside the client CPU of one round
                                    trip over a Unix socket, its RSS (--quick: 20 x 10, polling)
    live     bench/live_channel.py  ask raised on a member's agent -> `pane` event on the phone's live
                                    channel (and -> push request, full run only)
    writes   bench/crew_writes.py   writes phone -> lead -> member -> agent across many agents at once,
                                    journals fsync'd: receipts per second, p50/p99
    scale    bench/crew_scale.py    the lead with 100 members (99 simulated, 1 real) x 10 agents x 100
                                    conversations: CPU, RSS, dashboard API size and time, write round trip
    members  bench/fake_members.py  one `python -m collie.fixtures member --count 100 --agents 10 --conversations
                                    100` process against one lead: join time, lead CPU/RSS idle and at one
                                    change a second per member, the fake-member process's own memory
    speed    bench/speed.py         ask raised -> chat, agent row and Needs you (lone, right after a change,
                                    asked again) on the lead's own agent and a member's; a reply streaming
                                    at 20 updates/s on 10 agents, one viewed (issue 29)

Every latency stands beside its floor — a loopback HTTP round trip measured by the same benchmark in
the same run (each benchmark's docstring says which) — and the ratio is latency / floor p50. A
benchmark that fails is reported in the table and in the JSON (`error`) and the others still run; the
exit status is 1 when any failed. One whose module is not in this checkout is listed as skipped. `--quick` (CI) is small sizes, about 2 minutes; the full run about
10 minutes on two cores (588 s, 2026-12-01, before `members`, which adds about 80 s). The load average before and after each benchmark is in the JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.measure import check_writable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

BENCHES = {"wire": "wire_idle", "idle": "many_agents", "live": "live_channel", "writes": "crew_writes",
           "scale": "crew_scale", "members": "fake_members", "speed": "speed"}
MS = 1000.0


def row(key: str, figure: str, value, unit: str = "", *, floor: float | None = None, target: str = "",
        met: bool | None = None, scale: float = 1.0) -> dict:
    """One line of the table. Latencies are given in seconds with `unit="ms"` and their floor (s)."""
    if value is not None and unit == "ms":
        scale = MS
    shown = None if value is None else value * scale
    return {"key": key, "figure": figure, "value": shown, "unit": unit,
            "floor": None if floor is None else floor * MS, "ratio": None if floor in (None, 0) or value is None
            else value / floor, "target": target, "met": met}


def rows_wire(r: dict) -> list[dict]:
    idle = r["idle"]
    out = [row("wire.requests_per_day.polling_idle", "state requests / agent / day, polling, idle",
               idle["polling, idle"]["requests_per_day"]),
           row("wire.requests_per_day.polling_viewed", "state requests / agent / day, polling, viewed",
               idle["polling, viewed"]["requests_per_day"]),
           row("wire.requests_per_day.watch", "state requests / agent / day, watch (idle or viewed)",
               idle["watch, idle"]["requests_per_day"]),
           row("wire.bytes_per_idle_poll.polling", "bytes per idle poll, polling (request + 304)",
               idle["polling, idle"]["bytes_per_poll"], "B"),
           row("wire.bytes_per_idle_poll.watch", "bytes per idle poll, watch (request + 304)",
               idle["watch, idle"]["bytes_per_poll"], "B")]
    p = r["pane"]["isolated"]
    f = p["floor"]["p50"]
    out += [row("wire.ask_to_pane.p50", "ask -> pane route, p50 (1 agent, 100 conversations)", p["p50"], "ms", floor=f),
            row("wire.ask_to_pane.p99", "ask -> pane route, p99", p["p99"], "ms", floor=f,
                target="<= 10x floor", met=p["p99"] <= 10 * f)]
    return out


def rows_idle(r: dict) -> list[dict]:
    f = r["floor"]["cpu"]
    per = r["cpu_per_poll"]
    what = f"{r['agents']} agents x {r['conversations']} conversations, {'watch' if r['watch'] else 'polling'}"
    full = not r["quick"]  # a quick run has too few polls for the ratio to be judged
    return [row("idle.cpu_share", f"idle bridge CPU, share of one core ({what})", r["cpu_share"] * 100, "%"),
            row("idle.cpu_per_poll", "idle bridge CPU per idle poll (floor: client CPU of one round trip)", per, "ms",
                floor=f, target="<= 1.5x floor" if full else "", met=per <= 1.5 * f if full else None),
            row("idle.rss", "idle bridge RSS", r["rss_mib"], "MiB")]


def rows_live(r: dict) -> list[dict]:
    a = r["ask_to_channel"]
    f = a["floor"]["p50"]
    out = [row("live.ask_to_channel.p50", "ask on a member's agent -> live channel, p50", a["p50"], "ms", floor=f),
           row("live.ask_to_channel.p99", "ask on a member's agent -> live channel, p99", a["p99"], "ms", floor=f,
               target="<= 50 ms and <= 20x floor", met=a["p99"] <= 0.050 and a["p99"] <= 20 * f)]
    if "ask_to_push" in r:
        p = r["ask_to_push"]
        out.append(row("live.ask_to_push.p99", "ask on a member's agent -> push request, p99", p["p99"], "ms",
                       floor=p["floor"]["p50"]))
    return out


def rows_writes(r: dict) -> list[dict]:
    f = r["floor_p50"]
    what = f"{r['agents']} agents x {r['conversations']} conversations at once"
    out = [row("writes.receipts_per_s", f"writes phone -> lead -> member -> agent, receipts/s ({what})",
               r["receipts_per_s"], "/s", target=">= 300/s", met=r["receipts_per_s"] >= 300),
           row("writes.p50", "writes at once: phone -> receipt p50", r["receipt_p50"], "ms", floor=f),
           row("writes.p99", f"writes at once: phone -> receipt p99 ({r['concurrent']} in flight)", r["receipt_p99"],
               "ms", floor=f),
           row("writes.applied", "writes applied at the agents / acknowledged", r["applied"],
               f"/ {r['acknowledged']}", target="all", met=r["applied"] == r["acknowledged"])]
    o = r.get("at_rate")
    if o:
        p99_ok = o["receipt_p99"] is not None and o["receipt_p99"] <= 0.050
        out += [row("writes.rate.p50", f"writes offered at {o['rate']:g}/s: phone -> receipt p50", o["receipt_p50"],
                    "ms", floor=f),
                row("writes.rate.p99", f"writes offered at {o['rate']:g}/s: phone -> receipt p99", o["receipt_p99"],
                    "ms", floor=f, target="<= 50 ms" if o["rate"] >= 300 else "",
                    met=p99_ok if o["rate"] >= 300 else None),
                row("writes.rate.applied", f"writes offered at {o['rate']:g}/s: applied at the agents / acknowledged",
                    o["applied"], f"/ {o['acknowledged']}", target="all", met=o["applied"] == o["acknowledged"])]
        n = max(1, o["receipts"])
        out += [row(f"writes.rate.cpu.{k.split()[0]}", f"writes offered at {o['rate']:g}/s: CPU per write, {k}",
                    v / n, "ms CPU", scale=MS) for k, v in o["cpu_s"].items()]
    return out


def rows_scale(r: dict) -> list[dict]:
    f = r["floor"]["p50"]
    o = r["sizes"]
    crew = f"{o['members']} members x {o['agents']} agents x {o['conversations']} conversations"
    gib = 1024.0
    return [row("scale.conversations", f"lead: open conversations shown ({crew})", r["conversations"]),
            row("scale.load_s", "lead: every agent shown after the first snapshot", r["load_s"], "s"),
            row("scale.cpu_idle", "lead CPU idle (share of one core)", r["idle_cpu"] * 100, "%",
                target="<= 100 %", met=r["idle_cpu"] <= 1.0),
            row("scale.cpu_busy", f"lead CPU, {o['rate']:g} changes/s + dashboard back to back", r["busy_cpu"] * 100, "%",
                target="<= 100 %", met=r["busy_cpu"] <= 1.0),
            row("scale.rss_peak", "lead peak RSS (VmHWM)", r["peak_rss_mib"], "MiB", target="<= 1 GiB",
                met=r["peak_rss_mib"] <= gib),
            row("scale.dashboard_bytes", "GET /api/dashboard size", r["dash_bytes"] / 1024, "KiB"),
            row("scale.dashboard.p50", "GET /api/dashboard p50, idle", r["dash_idle"]["p50"], "ms", floor=f),
            row("scale.dashboard.p99", "GET /api/dashboard p99, idle", r["dash_idle"]["p99"], "ms", floor=f,
                target="<= 50 ms", met=r["dash_idle"]["p99"] <= 0.050),
            row("scale.dashboard_busy.p99", "GET /api/dashboard p99, while busy", r["dash_busy"]["p99"], "ms", floor=f,
                target="<= 50 ms", met=r["dash_busy"]["p99"] <= 0.050),
            row("scale.write.p50", "write phone -> lead -> member -> agent, one at a time, p50", r["write_rt"]["p50"],
                "ms", floor=f),
            row("scale.write.p99", "write phone -> lead -> member -> agent, one at a time, p99", r["write_rt"]["p99"],
                "ms", floor=f)]


def rows_members(r: dict) -> list[dict]:
    o, lf, fk = r["sizes"], r["lead_floor"], r["fake"]
    lab = f"{o['count']} x {o['agents']} x {o['conversations']}"
    return [row("members.join_s", f"fake members ({lab}): every one online on the lead, s", r["join_s"], "s"),
            row("members.join_one_s", "fake members: one member of 1 x 1 online on the lead (floor), s",
                r["one_member"]["join_s"], "s"),
            row("members.lead_cpu_idle", f"fake members ({lab}): lead CPU idle, share of one core (floor "
                f"{lf['cpu'] * 100:.1f} % with none)", r["idle_cpu"] * 100, "%"),
            row("members.lead_cpu_busy", f"fake members: lead CPU at {r['changes_per_s']} changes/s, share of one core",
                r["busy_cpu"] * 100, "%"),
            row("members.lead_rss", f"fake members: lead RSS busy (floor {lf['rss_mib']:.0f} MiB with none)",
                r["busy_rss_mib"], "MiB"),
            row("members.fake_rss", f"fake members: the fake-member process's RSS, busy (floor "
                f"{r['one_member']['rss_mib']:.0f} MiB for one 1 x 1 member)", fk["rss_busy_mib"], "MiB")]


def rows_speed(r: dict) -> list[dict]:
    """bench/speed.py (issue 29): ask -> each screen's data, and a streaming reply."""
    out = []
    a = r.get("asks")
    if a:
        from bench.measure import pct

        f = pct(a["floor"], 50)
        where = {"chat": "chat (pane event)", "row": "agent row (row event)",
                 "needs": "Needs you (row event + GET /api/needs)", "needs_event": "Needs you (needs event)"}
        series = {"lone": "lone", "after": "right after a change", "again": "asked again 30 ms after",
                  "swap": "one closed, another raised at once"}
        for agent, machine in (("own", "lead's own agent"), ("far", "member's agent")):
            for s_key, s_name in series.items():
                got = a.get(f"{agent}.{s_key}") or {}
                for w_key, w_name in where.items():
                    x = got.get(w_key)
                    if not x:
                        continue
                    out.append(row(f"speed.{agent}.{s_key}.{w_key}.p99", f"ask ({s_name}) -> {w_name}, p99, {machine}",
                                   x["p99"], "ms", floor=f, target="<= 100 ms", met=x["p99"] <= 0.100))
                if got.get("needs_never"):
                    out.append(row(f"speed.{agent}.{s_key}.needs_never", f"asks ({s_name}) never in GET /api/needs fetched on row events (the page today; the needs event has them all), "
                                   f"{machine}", got["needs_never"], f"/ {r['sizes']['asks']}",
                                   target="0", met=False))
    for part, what in (("stream", "lead's own agent viewed"), ("stream_far", "member's agent viewed")):
        st = r.get(part)
        if not st:
            continue
        from bench.measure import pct

        f = pct(st["floor"], 50)
        i = st["items"] or {"p50": None, "p99": None}
        ok = st["items"] is not None and not st["missing"]
        out += [row(f"speed.{part}.items.p50", f"streaming 20/s x {st['streams']} ({what}): update -> items event, p50",
                    i["p50"], "ms", floor=f),
                row(f"speed.{part}.items.p99", f"streaming ({what}): update -> items event, p99", i["p99"], "ms", floor=f,
                    target="<= 100 ms", met=ok and i["p99"] <= 0.100),
                row(f"speed.{part}.missing", f"streaming ({what}): updates never shown", st["missing"],
                    f"/ {st['viewed_updates']}", target="0", met=st["missing"] == 0),
                row(f"speed.{part}.dashboard.p99", f"streaming ({what}): GET /api/dashboard p99 meanwhile",
                    st["dashboard"]["p99"], "ms", floor=f, target="<= 50 ms", met=st["dashboard"]["p99"] <= 0.050),
                row(f"speed.{part}.floor_busy.p99", f"streaming ({what}): GET /healthz p99 meanwhile (the floor under load)",
                    (st.get("floor_busy") or {}).get("p99"), "ms"),
                row(f"speed.{part}.cpu", f"streaming ({what}): lead CPU per update", st["lead_cpu_per_update"], "ms CPU",
                    scale=MS)]
    return out


ROWS = {"wire": rows_wire, "idle": rows_idle, "live": rows_live, "writes": rows_writes, "scale": rows_scale,
        "members": rows_members, "speed": rows_speed}
# the keys every run (quick or full) has when nothing failed: tests/system/test_bench_runner.py checks them
KEYS = {
    "wire": ["wire.requests_per_day.polling_idle", "wire.requests_per_day.polling_viewed", "wire.requests_per_day.watch",
             "wire.bytes_per_idle_poll.polling", "wire.bytes_per_idle_poll.watch", "wire.ask_to_pane.p50",
             "wire.ask_to_pane.p99"],
    "idle": ["idle.cpu_share", "idle.cpu_per_poll", "idle.rss"],
    "live": ["live.ask_to_channel.p50", "live.ask_to_channel.p99"],
    "writes": ["writes.receipts_per_s", "writes.p50", "writes.p99", "writes.applied", "writes.rate.p50",
               "writes.rate.p99", "writes.rate.applied", "writes.rate.cpu.lead", "writes.rate.cpu.member"],
    "speed": ["speed.own.lone.chat.p99", "speed.far.after.chat.p99", "speed.stream.items.p99",
              "speed.stream.dashboard.p99", "speed.stream.cpu"],
    "scale": ["scale.conversations", "scale.load_s", "scale.cpu_idle", "scale.cpu_busy", "scale.rss_peak",
              "scale.dashboard_bytes", "scale.dashboard.p50", "scale.dashboard.p99", "scale.dashboard_busy.p99",
              "scale.write.p50", "scale.write.p99"],
    "members": ["members.join_s", "members.join_one_s", "members.lead_cpu_idle", "members.lead_cpu_busy",
                "members.lead_rss", "members.fake_rss"],
}


def present(name: str) -> bool:
    return (HERE / f"{BENCHES[name]}.py").exists()


def one(module_name: str, quick: bool, out: Path) -> None:
    """In the child: run one benchmark (the module named in BENCHES) and write its dict."""
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(REPO))
    module = importlib.import_module(module_name)
    with open(os.devnull, "w") as quiet:  # the table is the output; a benchmark's own prints go nowhere
        sys.stdout = quiet
        try:
            result = getattr(module, "suite", module.run)(quick=quick)
        finally:
            sys.stdout = sys.__stdout__
    out.write_text(json.dumps(result, default=str))


def end_group(child: subprocess.Popen) -> None:
    """End a benchmark's child and everything it started (its own session and process group)."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait()


def stopped(signum, _frame) -> None:
    """SIGTERM or SIGHUP ends the runner as Ctrl-C does: the running benchmark's processes go with it."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def run_one(name: str, quick: bool, timeout: float) -> dict:
    """Run one benchmark in a child process (its own session: a timeout ends it and all it started, and
    so does the runner's own end — Ctrl-C, SIGTERM, SIGHUP — so nothing of a stopped run keeps running)."""
    with tempfile.TemporaryDirectory(prefix="bench-") as d:
        out = Path(d) / "out.json"
        err = Path(d) / "stderr"
        load0, t0 = os.getloadavg(), time.monotonic()
        with open(err, "w") as e:
            child = subprocess.Popen([sys.executable, "-m", "bench", "--one", BENCHES[name], "--out", str(out)]
                                     + (["--quick"] if quick else []), cwd=REPO, stdout=subprocess.DEVNULL, stderr=e,
                                     start_new_session=True)
            try:
                code = child.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                end_group(child)
                code = f"timeout after {timeout:g} s"
            except BaseException:  # the runner was stopped
                end_group(child)
                raise
        took = time.monotonic() - t0
        info = {"seconds": round(took, 1), "load_before": load0, "load_after": os.getloadavg()}
        if code == 0 and out.exists():
            return {"result": json.loads(out.read_text()), **info}
        tail = err.read_text()[-2000:]
        return {"error": f"exit {code}" if isinstance(code, int) else code, "stderr": tail, **info}


def fmt(x, unit: str = "") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and x.is_integer() and unit != "ms":
        x = int(x)
    if isinstance(x, float):
        text = f"{x:,.1f}" if abs(x) < 1000 else f"{x:,.0f}"
    else:
        text = f"{x:,}"
    return f"{text} {unit}".strip()


def table(rows: list[dict]) -> str:
    head = ("figure", "value", "floor", "ratio", "target", "met?")
    lines = [[r["figure"], fmt(r["value"], r["unit"]), fmt(r["floor"], "ms") if r["floor"] is not None else "",
              f"{r['ratio']:.1f}x" if r["ratio"] is not None else "", r["target"],
              "" if r["met"] is None else ("yes" if r["met"] else "NO")] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    out = ["  ".join(str(x).ljust(w) for x, w in zip(head, widths))]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)) for line in lines]
    return "\n".join(out)


def pretty(text: str) -> str:
    return text.replace("->", "→").replace("<=", "≤").replace(">=", "≥").replace(" x ", " × ")


def markdown(doc: dict) -> str:
    """The table of a run as Markdown (bench/README.md), with the run's commit and load average."""
    one, five, fifteen = doc["load_end"]
    lines = [f"`python -m bench{' --quick' if doc['quick'] else ''}` at {doc['commit']}, {doc['started']}, "
             f"{doc['seconds']:.0f} s; load average at the end {one:.2f} {five:.2f} {fifteen:.2f} "
             f"({doc['cores']} cores); per benchmark (1 min, before → after): "
             + ", ".join(f"{name} {b['load_before'][0]:.1f} → {b['load_after'][0]:.1f}"
                         for name, b in doc["benchmarks"].items()) + ".", "",
             "| figure | value | floor | ratio | target | met? |", "|---|---|---|---|---|---|"]
    for r in doc["figures"]:
        floor = fmt(r["floor"], "ms") if r["floor"] is not None else ""
        ratio = f"{r['ratio']:.1f}×" if r["ratio"] is not None else ""
        met = "" if r["met"] is None else ("yes" if r["met"] else "**no**")
        lines.append(f"| {pretty(r['figure'])} | {fmt(r['value'], r['unit'])} | {floor} | {ratio} | {pretty(r['target'])} "
                     f"| {met} |")
    lines += [f"| FAILED: {e} | | | | | |" for e in doc["errors"]]
    lines += [f"| not run: {n} (bench/{BENCHES[n]}.py not in this checkout) | | | | | |" for n in doc.get("skipped", [])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description="Every benchmark, one table, one JSON file.")
    p.add_argument("--quick", action="store_true", help="small sizes, about 2 minutes (CI)")
    p.add_argument("--json", help="where to write the figures (default bench/results.json; "
                                  "bench/results-quick.json with --quick)")
    p.add_argument("--only", help=f"a comma-separated subset of {', '.join(BENCHES)}")
    p.add_argument("--timeout", type=float, default=None, help="seconds one benchmark may take (300; 1200 full)")
    p.add_argument("--markdown", metavar="JSON", help="print the table of an earlier run's JSON as Markdown")
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        one(args.one, args.quick, Path(args.out))
        return 0
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())))
        return 0
    if args.only is not None:
        names = list(dict.fromkeys(n.strip() for n in args.only.split(",")))  # each named once, in order
        unknown = [n for n in names if n not in BENCHES]
        if unknown:
            p.error(f"no benchmark {', '.join(map(repr, unknown))} (there are: {', '.join(BENCHES)})")
    else:
        names = list(BENCHES)
    if args.timeout is not None and args.timeout <= 0:
        p.error("--timeout must be a positive number of seconds")
    timeout = args.timeout or (300 if args.quick else 1200)
    path = Path(args.json) if args.json else HERE / ("results-quick.json" if args.quick else "results.json")
    check_writable(p, path, "the figures")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    doc: dict = {"quick": args.quick, "only": names if args.only is not None else None, "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                 "commit": commit or None, "cores": os.cpu_count(), "benchmarks": {}, "figures": [], "errors": []}
    t0 = time.monotonic()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stopped)
    doc["skipped"] = [n for n in names if not present(n)]
    for name in names:
        if name in doc["skipped"]:
            print(f"{name}: bench/{BENCHES[name]}.py is not in this checkout; skipped", file=sys.stderr)
            continue
        print(f"{name} ({BENCHES[name]}.py) ...", end=" ", flush=True, file=sys.stderr)
        got = run_one(name, args.quick, timeout)
        doc["benchmarks"][name] = got
        if "error" in got:
            doc["errors"].append(f"{name}: {got['error']}")
            print(f"FAILED ({got['error']}, {got['seconds']:g} s)", file=sys.stderr)
            continue
        try:
            doc["figures"] += ROWS[name](got["result"])
        except (KeyError, TypeError, ZeroDivisionError) as exc:  # a benchmark's dict without a figure we print
            doc["errors"].append(f"{name}: figures: {type(exc).__name__}: {exc}")
        print(f"{got['seconds']:g} s", file=sys.stderr)
    doc["seconds"] = round(time.monotonic() - t0, 1)
    doc["load_end"] = os.getloadavg()
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    one_, five, fifteen = doc["load_end"]
    print(f"python -m bench{' --quick' if args.quick else ''} at {doc['commit']}, {doc['started']}, "
          f"{doc['seconds']:.0f} s; load average at the end {one_:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cores)")
    print(table(doc["figures"]))
    for e in doc["errors"]:
        print(f"FAILED {e}")
    for name in doc["skipped"]:
        print(f"SKIPPED {name}: bench/{BENCHES[name]}.py is not in this checkout")
    print(f"figures written to {path}")
    return 1 if doc["errors"] else 0


def entry(argv: list[str] | None = None) -> int:
    """`main`, with a stop (Ctrl-C, SIGTERM, SIGHUP) said in one line and exit status 130."""
    try:
        return main(argv)
    except KeyboardInterrupt as exc:  # stopped: the running benchmark was ended with all it started
        print(f"\nstopped ({exc or 'SIGINT'}): no figures written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(entry())

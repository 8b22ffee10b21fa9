"""The fault campaign (issue 8 "Done when", issue 15 item 2): N trials, one table, JSON.

    .venv/bin/python -m bench.faults --trials 40 [--seed 1] [--json faults.json] [--only crew]
    .venv/bin/python bench/faults.py --trials 40          (the same, as a script)

Trial i uses seed S+i; `--trials 1 --seed X` replays trial X (same scenario, faults and requests;
process timing is real, so a replay reproduces the conditions, not every interleaving). What one
trial does and how it is judged: bench/faultrun.py. A failing trial keeps its folder (processes'
logs, the agent's ledger, trial.json with every receipt) and prints its path and its seed.
Trials run one after another: a trial is 3-4 Python processes, about 10-20 s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: bench/faults.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.faultrun import SCENARIOS, run_trial  # noqa: E402
from bench.measure import check_writable  # noqa: E402

COLUMNS = ("trials", "crash_points_hit", "kills", "requests", "acknowledged", "duplicates", "losses",
           "wrong_receipts", "unresolved")
HEADS = ("scenario", "trials", "crash points hit", "kills", "requests", "acked", "duplicates", "losses",
         "wrong receipts", "unresolved")


def seeds_for(first: int, n: int, only: str | None) -> list[int]:
    out, s = [], first
    while len(out) < n:
        if only is None or SCENARIOS[s % len(SCENARIOS)] == only:
            out.append(s)
        s += 1
    return out


def table(results: list[dict]) -> str:
    rows: dict[str, dict] = {}
    for r in results:
        if r.get("skipped"):
            continue
        for key in (r["scenario"], "total"):
            row = rows.setdefault(key, dict.fromkeys(COLUMNS, 0))
            row["trials"] += 1
            for col in COLUMNS[1:]:
                row[col] += int(r.get(col) or 0)
    order = [s for s in ("local", "crew", "ttl", "diskfull") if s in rows] + (["total"] if rows else [])
    lines = ["| " + " | ".join(HEADS) + " |", "|" + "---|" * len(HEADS)]
    for key in order:
        row = rows[key]
        lines.append("| " + " | ".join([key, *(f"{row[c]:,}" for c in COLUMNS)]) + " |")
    return "\n".join(lines)


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=positive, default=20)
    p.add_argument("--seed", type=int, default=1, help="trial i uses seed SEED+i (default 1)")
    p.add_argument("--json", help="write every trial's result here")
    p.add_argument("--burst", type=positive, default=24, help="phone requests per trial, at most (two threads; a "
                                                             "card answer with no ask open sends nothing)")
    p.add_argument("--only", choices=sorted(set(SCENARIOS)), help="run only trials of this scenario")
    p.add_argument("--keep", choices=("failed", "all", "none"), default="failed", help="which trial folders to keep")
    p.add_argument("--root", help="make trial folders here (default /tmp)")
    p.add_argument("--open", type=int, default=0, help="the agent has this many more open conversations, listed "
                                                      "first: more than a view carries (200) tests the cut (issue 32)")
    args = p.parse_args(argv)
    if args.json:
        check_writable(p, args.json, "the results")
    results = []
    t0 = time.monotonic()

    def save(complete: bool) -> None:  # after every trial too: a long run cut short keeps what it measured
        if args.json:
            Path(args.json).write_text(json.dumps({"trials": len(results), "first_seed": args.seed, "burst": args.burst, "open": args.open,
                                                   "complete": complete, "results": results}, indent=1, default=str))
    for n, seed in enumerate(seeds_for(args.seed, args.trials, args.only), 1):
        r = run_trial(seed, burst=args.burst, keep=args.keep, root=Path(args.root) if args.root else None,
                      extra_open=args.open)
        results.append(r)
        save(complete=False)
        if r.get("skipped"):
            line = f"skipped: {r['skipped']}"
        elif r.get("error"):
            line = f"ERROR {r['error']}"
        else:
            line = (f"requests {r['requests']:3}  acked {r['acknowledged']:3}  dup {r['duplicates']}  "
                    f"lost {r['losses']}  wrong {r['wrong_receipts']}  unresolved {r['unresolved']}"
                    + (f"  stuck {r['stuck']}" if r.get("stuck") else "")
                    + (f"  {'; '.join(r['exits'])}" if r.get("exits") else "")
                    + (f"  disk-full answers {r['disk_full_answers']}" if "disk_full_answers" in r else "")
                    + (f"  ttl: {len(r['ttl'])} violation(s)" if r.get("ttl") else ""))
        print(f"[{n}/{args.trials}] seed {seed:5} {r['scenario']:8} {r['seconds']:5.1f} s  "
              f"{'; '.join(r['faults']) or 'no fault'}: {line}", flush=True)
        if r.get("failed"):
            print(f"    FAILED — kept {r['folder']} ; replay: python -m bench.faults --trials 1 --seed {seed}",
                  flush=True)
    print()
    print(table(results))
    skipped = [r for r in results if r.get("skipped")]
    errors = [r for r in results if r.get("error")]
    failed = [r for r in results if r.get("failed")]
    disk = [r for r in results if "disk_unclear" in r]
    ttl = [v for r in results for v in r.get("ttl") or []]
    if disk:
        print(f"disk full: {sum(r['disk_unclear'] for r in disk)} write(s) answered while full by no receipt, or a "
              f"refusal that does not say why, over {len(disk)} trial(s)")
    exits = [e for r in results for e in r.get("exits") or []]
    if exits:
        print(f"{len(exits)} process(es) died by themselves (not kill -9), e.g. {exits[0]}")
    if ttl:
        print(f"TTL: {len(ttl)} violation(s), e.g. {ttl[0]}")
    if skipped:
        print(f"skipped {len(skipped)} trial(s): {skipped[0]['skipped']}")
    if errors:
        print(f"{len(errors)} trial(s) could not finish (counted as failed): seeds {[r['seed'] for r in errors]}")
    print(f"{len(failed)} failed trial(s) of {len(results)}; {time.monotonic() - t0:.0f} s")
    save(complete=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

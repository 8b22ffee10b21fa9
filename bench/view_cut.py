"""What a member's agent view costs the lead at the cut (issue 32, crew.md §6): is 200 the right cut?

    .venv/bin/python -m bench.view_cut

For an agent listing 100, 200 and 231 open conversations of ~750 characters each (crew.md §6's size),
prints what the lead keeps (kept, left_out), the view's JSON size against the 1 MiB frame, its cost
against a member's 8 MiB budget (collie.lead.members.hub.view_cost) for 10 such agents, and the time to build its
reader (collie.lead.members.hub.build_reader, a worker thread's work per view frame).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from collie.crew import crewwire  # noqa: E402
from collie.lead.members.views import MEMBER_VIEWS_MAX, build_reader, view_cost  # noqa: E402
from tests.crewlab import fake_view  # noqa: E402

ROUNDS = 20


def main() -> int:
    print(f"| listed | kept | left_out | view KiB (of {crewwire.MAX_FRAME // 1024}) | cost MiB | 10 agents MiB "
          f"(of {MEMBER_VIEWS_MAX // 2**20}) | build ms |")
    print("|---|---|---|---|---|---|---|")
    for n in (100, 200, 231):
        raw = fake_view("desk", n)
        for conv in raw["state"]["conversations"]:
            conv["title"] = "x" * 600  # with its other fields, ~750 characters a conversation
        view = crewwire.parse_member_frame(json.dumps({"type": "snapshot", "agents": [raw]}))[1].agents[0]
        started = time.perf_counter()
        for _ in range(ROUNDS):
            reader, text = build_reader(view.trimmed(), 0.0)
        took = (time.perf_counter() - started) / ROUNDS
        cost = view_cost(reader, text)
        print(f"| {n} | {len(reader.conversations)} | {reader.left_out} | {len(text) / 1024:.0f} | {cost / 2**20:.2f} "
              f"| {10 * cost / 2**20:.1f} | {took * 1000:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

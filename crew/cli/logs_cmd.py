"""`collie logs [-f] [-n N]`: the bridge's log, FATAL lines included (features V2).

Each line is shown through `printable`, so even a log written by an older Collie cannot send
escape sequences to the terminal (issue 9.5).
"""

from __future__ import annotations

import sys
import time
from collections import deque

from crew.errors import CollieError
from crew.logs import printable


def register(sub) -> None:
    p = sub.add_parser("logs", help="show the bridge's log")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    p.add_argument("-n", "--lines", type=int, default=200, help="how many of the last lines (default 200, 0 = all)")
    p.set_defaults(run=run)


def _shown(line: str) -> str:
    return printable(line.removesuffix("\n")) + "\n"


def run(args, paths) -> int:
    try:
        fh = open(paths.log, encoding="utf-8", errors="replace", newline="\n")  # a lone \r is no line break
    except FileNotFoundError:
        raise CollieError(f"no log yet at {paths.log}: the bridge has not run here (start it with `collie serve`)") from None
    with fh:
        lines = fh.readlines() if args.lines <= 0 else deque(fh, maxlen=args.lines)
        sys.stdout.writelines(_shown(line) for line in lines)
        sys.stdout.flush()
        while args.follow:
            line = fh.readline()
            if line:
                sys.stdout.write(_shown(line))
                sys.stdout.flush()
            else:
                time.sleep(0.2)
    return 0

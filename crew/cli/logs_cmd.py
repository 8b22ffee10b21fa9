"""`collie logs [-f] [-n N]`: the bridge's log, FATAL lines included (features V2).

Each line is shown through `printable`, so even a log written by an older Collie cannot send
escape sequences to the terminal (issue 9.5).
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque

from collie.crew.errors import CollieError
from collie.crew.logs import printable, rotated


def register(sub) -> None:
    p = sub.add_parser("logs", help="show the bridge's log")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    p.add_argument("-n", "--lines", type=int, default=200, help="how many of the last lines (default 200, 0 = all)")
    p.set_defaults(run=run)


def _shown(line: str) -> str:
    return printable(line.removesuffix("\n")) + "\n"


def _open(path):
    return open(path, encoding="utf-8", errors="replace", newline="\n")  # a lone \r is no line break


def run(args, paths) -> int:
    try:
        fh = _open(paths.log)
    except FileNotFoundError:
        raise CollieError(f"no log yet at {paths.log}: the bridge has not run here (start it with `collie serve`)") from None
    with fh:
        lines = deque(maxlen=args.lines if args.lines > 0 else None)
        try:  # the part before the last rotation (collie.crew.logs.LOG_MAX) comes first
            with _open(rotated(paths.log)) as older:
                lines.extend(older)
        except FileNotFoundError:
            pass
        lines.extend(fh)
        sys.stdout.writelines(_shown(line) for line in lines)
        sys.stdout.flush()
        while args.follow:
            line = fh.readline()
            if line:
                sys.stdout.write(_shown(line))
                sys.stdout.flush()
                continue
            try:
                moved = os.stat(paths.log).st_ino != os.fstat(fh.fileno()).st_ino
            except FileNotFoundError:
                moved = False
            if moved:  # rotated: what is left of the old file was read above; follow the new one
                fh.close()
                fh = _open(paths.log)
            else:
                time.sleep(0.2)
    return 0

"""`collie`: parse the command line, dispatch to a verb, turn `CollieError` into one line + status."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from collie.crew import __version__
from collie.crew.cli import (acp_cmd, crew_cmd, demo, doctor, durable, logs_cmd, pair_cmd, restart, serve, service,
                             status, tokens_cmd)
from collie.crew.errors import CollieError
from collie.crew.logs import printable
from collie.crew.paths import Paths


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="collie", description="Supervise durable AI coding agents from your phone.")
    p.add_argument("--version", action="version", version=f"collie {__version__}")
    sub = p.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    for module in (demo, serve, restart, logs_cmd, doctor, status, durable, crew_cmd, tokens_cmd, pair_cmd, service):
        module.register(sub)
    acp_cmd.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    if argv[:1] == ["serve"] and not {"-h", "--help"} & set(argv[1:]):
        return serve.exec_daemon(argv[1:])  # the daemon parses its own options
    args = parser.parse_args(argv)
    paths = Paths.from_env()
    try:
        status = args.run(args, paths)
        sys.stdout.flush()  # here, not at exit: a reader that left (`collie status | head -1`) is caught below
        return status
    except CollieError as exc:
        print(f"collie: {printable(exc)}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader of our output left: nothing more to say, and no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's own flush must not fail too
        return 128 + signal.SIGPIPE

if __name__ == "__main__":
    sys.exit(main())

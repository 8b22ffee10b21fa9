"""The supervisor of one ACP terminal (issue 42 items 6 and 7): a small process between the adapter
and the command, so that nothing the command starts can outlive the terminal.

    python -I -S reaper.py STATUS_FD -- PROGRAM [ARG…]      # started by collie.crew.acp.terminals only

It makes itself a *child subreaper* (`prctl(PR_SET_CHILD_SUBREAPER)`): whatever the command starts
and leaves — a `setsid` or `setpgid` child, a double fork, a daemon — is re-parented to it, not to
init, so every descendant stays in its tree whatever process group or session it moved to. It runs
the command (stdin /dev/null, its stdout and stderr the terminal's output), reports on `STATUS_FD`
(`started PID`, `error ERRNO` when it could not be run, then `exit CODE` or `signal NUMBER` when the
command itself ended, followed by ` last` when nothing else of it runs), and exits only when no
descendant is left; its exit is the terminal's end.

Its stdin is the adapter's control pipe. A byte on it — or its end, which is also what the adapter's
death (SIGKILL included) looks like, as the kernel closes the adapter's end — means *end everything*:
every descendant, found by walking `/proc` parent links down from here, is SIGKILLed, again until
none is left (one forked meanwhile is re-parented here and found on the next walk). SIGTERM, SIGHUP
and SIGINT mean the same.

Standard library only, run with `-I -S` (no site, no environment variables of Python's): it imports
nothing of Collie, so it starts fast and sees nothing of the adapter's.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys

PR_SET_CHILD_SUBREAPER = 36
KILL_ROUND = 0.05  # while ending everything, how often the tree is walked again
END_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def processes() -> list[tuple[int, bytes, int, int]]:
    """Every process in /proc as `(pid, state, ppid, pgrp)` (state `b"Z"` or `b"X"`: exited, not yet reaped);
    one that ends while /proc is read is left out. OSError when /proc cannot be listed. (The one walk of /proc:
    collie.crew.acp.procs and the tests use it too.)"""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2:].split()  # after "pid (comm) ": state ppid pgrp …
        if len(fields) > 2:
            found.append((int(entry), fields[0], int(fields[1]), int(fields[2])))
    return found


def descendants(root: int) -> list[int]:
    """Every process below `root`, from the parent links in /proc."""
    children: dict[int, list[int]] = {}
    for pid, _state, ppid, _pgrp in processes():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def kill_all(root: int) -> None:
    for pid in descendants(root):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def say(fd: int, line: str) -> None:
    try:
        os.write(fd, line.encode() + b"\n")
    except OSError:  # the adapter is gone: its control pipe's end says so too
        pass


def run(status: int, argv: list[str]) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        say(status, f"error {ctypes.get_errno()}")
        return 1
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    for sig in (signal.SIGCHLD, *END_SIGNALS):
        signal.signal(sig, lambda *_: None)
    err_r, err_w = os.pipe()
    leader = os.fork()
    if leader == 0:
        try:
            os.close(err_r)
            for sig in (signal.SIGCHLD, *END_SIGNALS, signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(sig, signal.SIG_DFL)  # Python ignores SIGPIPE; a command must not inherit that
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.execvp(argv[0], argv)
        except OSError as exc:
            os.write(err_w, str(exc.errno or 0).encode())
        os._exit(127)
    os.close(err_w)
    failed = os.read(err_r, 32)  # empty: the exec happened (the pipe closed on exec)
    os.close(err_r)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # the output pipe is the command's alone: it ends when the last of them goes
    os.dup2(null, 2)
    os.close(null)
    if failed:
        os.waitpid(leader, 0)
        say(status, f"error {int(failed)}")
        return 0
    say(status, f"started {leader}")
    ending = False
    watch = [0, wake_r]
    while True:
        while True:  # reap every child that ended, the re-parented ones too
            try:
                pid, code = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return 0  # nobody left: the terminal is over
            if pid == 0:
                break
            if pid == leader:  # its orphans are re-parented here before it can be reaped: the test below is exact
                end = f"signal {os.WTERMSIG(code)}" if os.WIFSIGNALED(code) else f"exit {os.WEXITSTATUS(code)}"
                try:
                    os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                except ChildProcessError:
                    end += " last"  # nothing else of the command runs: the terminal is over with it
                say(status, end)
        if ending:
            kill_all(os.getpid())
        ready, _, _ = select.select(watch, [], [], KILL_ROUND if ending else None)
        if 0 in ready:
            os.read(0, 64)  # a byte, or the end of the pipe: either way, end everything
            ending = True
            watch.remove(0)
        if wake_r in ready:
            got = os.read(wake_r, 256)
            if any(n in got for n in END_SIGNALS):
                ending = True


def main() -> int:
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        print("usage: reaper.py STATUS_FD -- PROGRAM [ARG…]", file=sys.stderr)
        return 2
    status = int(sys.argv[1])
    os.set_inheritable(status, False)
    return run(status, sys.argv[3:])


if __name__ == "__main__":
    sys.exit(main())

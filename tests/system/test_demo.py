"""`collie demo` (issue 10.1): the whole product on one machine, in one command, until Ctrl-C."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from collie.crew.demo import SleepCycle, Summary, clip
from collie.crew.paths import Paths
from tests.crewlab import REPO, wait_for
from tests.demolab import alive, descendants
from tests.procs import LIMIT, stop


def test_sleep_cycle_alternates_at_exact_times():
    """The sleeping member is awake `awake` s, then asleep `asleep` s; a late step never shortens a phase."""
    c = SleepCycle.starting(100.0, awake=15.0, asleep=10.0)
    assert [c.step(t) for t in (100.0, 114.999)] == [None, None]
    assert c.step(115.0) == "sleep" and c.state == "asleep"
    assert c.step(124.999) is None
    assert c.step(125.0) == "wake" and c.until == 140.0
    assert c.step(170.0) == "sleep" and c.until == 180.0  # late: the nap still lasts 10 s from now


def test_summary_reads_the_lead_api_and_escapes_what_it_prints():
    """D1, D5, I7: machines in the demo's order (asleep wins over the lead's view); agent text is one clean line."""
    dashboard = {"sections": [
        {"machine": "local", "online": True, "agents": [{"name": "desk", "line2": "deployer, local", "status": "ready",
                                                          "open": 1, "waiting": 1}]},
        {"machine": "laptop", "online": False, "agents": [{"name": "scribe", "line2": "streamer, local, laptop",
                                                            "status": "unreachable", "status_label": "Unreachable"}]}]}
    asks = [{"machine": "local", "agent": "desk", "conversation": "deploy", "kind": "permission",
             "title": "Deploy\x1b[31m to staging?\n" + "x" * 100}]
    inbox = [{"machine": "laptop", "agent": "scribe", "id": "r1", "state": "approved",
              "state_text": "queued, machine offline since 22:00"},
             {"machine": "laptop", "agent": "scribe", "id": "r0", "state": "done", "state_text": "done"}]
    s = Summary.from_api(dashboard, asks, inbox, machines=["local", "workshop", "laptop"], asleep={"laptop"})
    assert [(m.machine, m.role, m.state) for m in s.machines] == [
        ("local", "lead", "online"), ("workshop", "member", "starting"), ("laptop", "member", "asleep")]
    # one capitalisation for every status word, as the phone shows them (features D2: `Unreachable`, …)
    assert [(a.machine, a.name, a.status) for a in s.agents] == [("local", "desk", "Ready"),
                                                                  ("laptop", "scribe", "Unreachable")]
    assert "\x1b" not in s.asks[0].title and "\n" not in s.asks[0].title and len(s.asks[0].title) == 60
    assert s.plain_line() == ("[demo] summary: local online, workshop starting, laptop asleep; 2 agents, 1 ready; "
                              "1 open asks; inbox: 1 waiting, 0 running")
    assert [i.item for i in s.inbox] == ["r1"]  # a finished item is no longer work to watch
    assert clip(None) == "" and clip("a\tb") == "a b"


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.slow
def test_demo_runs_the_whole_crew_and_ctrl_c_leaves_nothing_behind():
    """10.1 done-when, on real processes: ready line; three machine sections with agents (D5); an open ask on
    a member (Q4); an inbox item queued while its member slept ran after it woke (I1, I5, I7); SIGINT ends
    every process the demo started (how soon — 5 s by the demo's SIGTERM-then-SIGKILL — is a figure of
    bench/demo_stop.py, not a test's deadline: a loaded machine is slow); the user's own config and state
    folders stay untouched."""
    home = Path(tempfile.mkdtemp(prefix="demo-home-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COLLIE_", "XDG_"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / "xdg-config"), XDG_STATE_HOME=str(home / "xdg-state"),
               PYTHONPATH=str(REPO))
    real = Paths.from_env(env)
    before = tree(home)
    proc = subprocess.Popen([sys.executable, "-m", "collie.crew.cli.main", "demo", "--awake", "2", "--asleep", "5"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True)
    reader.start()

    def expect(pattern: str, timeout: float = LIMIT) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                assert proc.poll() is None, f"the demo exited {proc.returncode}: {seen[-10:]}"
                continue
            seen.append(line)
            if m := re.search(pattern, line):
                return m
        raise AssertionError(f"no line matching {pattern!r}; saw {seen[-10:]}")

    try:
        address = expect(r"^\[demo\] ready: phone API on (http://127\.0\.0\.1:\d+) ").group(1)
        token_file = Path(expect(r"\$\(cat (\S+)\)").group(1))
        base = token_file.parents[2]
        token = token_file.read_text().strip()
        with httpx.Client(base_url=address, headers={"authorization": f"Bearer {token}"}, timeout=10) as c:
            sections = c.get("/api/dashboard").json()["sections"]
            assert [s["machine"] for s in sections] == ["local", "laptop", "workshop"]
            assert all(s["agents"] for s in sections)
            forms = next(a for s in sections if s["machine"] == "workshop" for a in s["agents"] if a["name"] == "forms")
            assert forms["waiting"] == 4
            waiting = [r for r in c.get("/api/agents/workshop/forms/conversations").json()["open"] if r["waiting"]]
            kinds = {c.get(f"/api/agents/workshop/forms/conversations/{r['id']}").json()["ask"]["kind"] for r in waiting}
            assert kinds == {"choice", "text", "form"}

            rid = expect(r"^\[demo\] send (\S+) laptop/scribe: queued \(queued, machine offline since ").group(1)
            inbox = c.get("/api/agents/laptop/scribe/inbox").json()["items"]
            item = next(i for i in inbox if rid in (i.get("id"), i.get("request_id")))
            assert item["state"] == "approved" and item["state_text"].startswith("queued, machine offline since ")
            laptop = next(s for s in c.get("/api/dashboard").json()["sections"] if s["machine"] == "laptop")
            assert laptop["online"] is False  # it waits because its member sleeps, not because it is slow
            expect(r"^\[demo\] wake laptop: awake")

            def ran():
                got = c.get("/api/agents/laptop/scribe/conversations/chat/items")
                return got.status_code == 200 and rid in [i.get("request_id") for i in got.json()["items"]
                                                          if i["kind"] == "user"]
            wait_for(ran, timeout=LIMIT, what="the queued item ran after the laptop woke")
            expect(rf"^\[demo\] ran {rid} laptop/scribe: done")
        started = descendants(proc.pid)
        assert len([p for p in started if alive(p)]) >= 8  # 5 agents, 3 bridges
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=LIMIT)
        wait_for(lambda: not any(alive(p) for p in started), timeout=LIMIT, what="every process the demo started ended")
        assert proc.returncode == 0
        expect(r"^\[demo\] stopped \d+ processes and removed ", timeout=LIMIT)
        assert not base.exists()
        assert token not in "".join(seen)  # the credential is named by its file, never printed
    finally:
        stop(proc)
        reader.join(timeout=5)
        proc.stdout.close()
    assert tree(home) == before == []
    home.rmdir()
    assert not real.config_dir.exists() and not real.state_dir.exists()


def test_live_screen_fits_one_screen():
    """10.1: the live summary (machines, agents, open asks, inbox, last receipts) fits 45 lines of 100 columns."""
    from rich.console import Console

    from collie.crew.cli.demo import render
    from collie.crew.demo import Event

    dashboard = {"sections": [{"machine": m, "online": True, "agents": [
        {"name": f"a{i}", "line2": "deployer, local", "status": "ready", "open": 4, "waiting": 4} for i in range(2)]}
        for m in ("local", "workshop", "laptop")]}
    asks = [{"machine": "workshop", "agent": "forms", "conversation": f"c{i}", "kind": "form", "title": "Release"}
            for i in range(12)]
    inbox = [{"machine": "laptop", "agent": "scribe", "id": f"r{i}", "state": "approved",
              "state_text": "queued, machine offline since 11:42"} for i in range(9)]
    events = [Event("11:42:00", "send", "laptop/scribe", "queued", "queued, machine offline since 11:42", "5d0e9c2a-1")
              for _ in range(6)]
    summary = Summary.from_api(dashboard, asks, inbox, machines=["local", "workshop", "laptop"], asleep=set())
    console = Console(width=100, record=True, file=open(os.devnull, "w"))
    console.print(render("head line", summary, events))
    console.file.close()
    text = console.export_text()
    assert len(text.splitlines()) <= 45
    for title in ("Machines", "Agents", "Open asks (12)", "… and 4 more", "Inbox", "… and 5 more", "Last receipts",
                  "send 5d0e9c2a"):
        assert title in text


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(monkeypatch, tmp_path):
    """Ctrl-C ends every process the demo started: one that ignores SIGTERM gets SIGKILL after STOP_GRACE."""
    from collie.crew.cli import demo

    monkeypatch.setattr(demo, "STOP_GRACE", 0.3)
    procs = demo.Processes()
    stubborn = procs.start("stubborn", [sys.executable, "-c", "import signal, sys, time\n"
                                        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\n"
                                        "time.sleep(60)"], dict(os.environ), tmp_path / "log")
    polite = procs.start("polite", [sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ),
                         tmp_path / "log2")
    wait_for(lambda: "up" in (tmp_path / "log").read_text(), what="the stubborn child ignores SIGTERM")
    assert procs.stop_all() == 2
    assert stubborn.returncode == -signal.SIGKILL and polite.returncode == -signal.SIGTERM
    assert procs.procs == []


def test_lead_host_is_loopback_unless_lan_and_refuses_what_a_phone_cannot_reach(monkeypatch):
    """Issue 26: without --lan the lead binds 127.0.0.1; --lan takes this machine's network address, or
    the one given; loopback, wildcard and non-addresses are refused in one line before anything starts."""
    from collie.crew.cli import demo
    from collie.crew.errors import UsageError

    assert demo.lead_host(None) == "127.0.0.1"
    assert demo.lead_host("10.214.0.1") == "10.214.0.1"
    monkeypatch.setattr(demo, "lan_address", lambda: "192.168.1.20")
    assert demo.lead_host("auto") == "192.168.1.20"
    monkeypatch.setattr(demo, "lan_address", lambda: None)
    for bad, words in (("auto", "no network address besides loopback"), ("127.0.0.1", "not a network address"),
                       ("0.0.0.0", "not a network address"), ("phone.example", "is not an IP address: "),
                       ("999.1.1.1", r"^--lan 999\.1\.1\.1 is not an IP address: give this machine's network address")):
        with pytest.raises(UsageError, match=words):
            demo.lead_host(bad)
    port = demo.free_port("127.0.0.1")
    import socket

    with socket.socket() as s:  # free now: the lead binds it, and binds it again at every restart
        s.bind(("127.0.0.1", port))
    with pytest.raises(UsageError, match="^--lan 192.0.2.7 is an IP address, but not an address of this machine"):  # an address, just not ours
        demo.free_port("192.0.2.7")


def test_pairing_lines_say_what_to_do_and_escape_what_the_lead_sent():
    """Issue 26: the link on a line of its own; with TLS the fingerprint and what to compare on the phone;
    on loopback where it opens and how to reach a phone; how to get another; nothing unescaped."""
    from collie.crew.cli.demo import pairing_lines

    tls = pairing_lines({"link": "https://10.0.0.2:4/pair#abc", "fingerprint": "AB:CD", "loopback": False}, "more")
    assert tls[1] == "  https://10.0.0.2:4/pair#abc"
    assert "The lead's certificate (SHA-256): AB:CD" in tls and tls[-1] == "more"
    assert any("go on only if it shows this fingerprint" in line for line in tls)
    assert not any("--lan" in line for line in tls)
    loop = pairing_lines({"link": "http://127.0.0.1:4/pair#abc\x1b[2J", "fingerprint": None, "loopback": True}, "m")
    assert "\x1b" not in "".join(loop) and any("`collie demo --lan`" in line for line in loop)
    assert not any("SHA-256" in line for line in loop)
    own = pairing_lines({"link": "https://10.0.0.2:4/pair#abc", "fingerprint": "AB:CD", "loopback": False,
                         "trust": "https://10.0.0.2:4/trust"}, "more")  # the lead's own authority (issue 35)
    assert any("Trust the lead once" in line and "https://10.0.0.2:4/trust" in line for line in own)
    assert any("certificate authority (SHA-256): AB:CD" in line for line in own)


def test_running_demos_are_this_users_private_live_ones_newest_first(tmp_path):
    """Issue 26: `collie demo pair` finds a demo by its folder: private (0700), this user's, and its
    demo.json naming a live process; a folder left by a killed demo, or open to others, is not one."""
    import json

    from collie.crew.cli import demo

    def make(name: str, pid: int, mode: int = 0o700, mtime: float = 0.0) -> Path:
        d = tmp_path / f"{demo.DEMO_PREFIX}{name}"
        d.mkdir()
        (d / demo.MARK).write_text(json.dumps({"pid": pid}))
        d.chmod(mode)
        os.utime(d, (mtime, mtime))
        return d

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    old, new = make("old", os.getpid(), mtime=1000.0), make("new", os.getpid(), mtime=2000.0)
    make("left", dead.pid)
    make("open", os.getpid(), mode=0o755)
    (tmp_path / f"{demo.DEMO_PREFIX}nomark").mkdir(mode=0o700)
    assert demo.running_demos(str(tmp_path)) == [new, old]
    assert demo.lead_paths_of(new).control_socket == new / "lead" / "state" / "bridge.sock"


def test_a_silent_bridge_is_shown_as_silent_not_as_its_last_view():
    """Issue 26: a machine whose bridge does not answer (restarting, exited) says so in the live view."""
    dashboard = {"sections": [{"machine": "local", "online": True, "agents": []},
                              {"machine": "workshop", "online": True, "agents": []}]}
    s = Summary.from_api(dashboard, [], [], machines=["local", "workshop", "laptop"], asleep={"laptop"},
                         silent={"local", "laptop"})
    assert [m.state for m in s.machines] == ["silent", "online", "asleep"]


def test_keys_are_off_without_a_terminal_and_waiting_then_only_sleeps():
    """Keys are read only from a terminal; without one `wait` returns nothing (and the demo still polls)."""
    from collie.crew.cli.demo import Keys

    with open(os.devnull) as stream:
        keys = Keys(stream)
        assert not keys.on and keys.wait(0.0) == ""
        keys.close()


@pytest.mark.parametrize("value", ["-3", "0", "nan", "inf", "100000", "soon"])
def test_awake_and_asleep_out_of_range_are_usage_errors_that_say_the_range(value, capsys):
    """Issue 26 check: `collie demo --awake -3` started a demo; a phase outside 1..86400 s is exit 2 naming it."""
    from collie.crew.cli.main import build_parser

    for flag in ("--awake", "--asleep"):
        with pytest.raises(SystemExit) as done:
            build_parser().parse_args(["demo", flag, value])
        assert done.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {flag}: " in err and "is not a number of seconds from 1 to 86400" in err
    args = build_parser().parse_args(["demo", "--awake", "2.5", "--asleep", "86400"])
    assert (args.awake, args.asleep) == (2.5, 86400.0)


@pytest.mark.parametrize("argv, words", [
    (["demo", "pair", "--lan"], "`demo pair` does not take --lan: it prints a link for the running demo, on the "
                                "address the demo was started with (to pair over the network, stop the demo and "
                                "start it with `"),
    (["demo", "pair", "--lan", "10.0.0.2", "--plain"], "`demo pair` does not take --lan or --plain"),
    (["demo", "restart", "--no-qr"], "`demo restart` does not take --no-qr: it restarts the running demo's lead"),
    (["demo", "restart", "--awake", "5"], "`demo restart` does not take --awake"),
])
def test_a_flag_that_does_not_apply_to_the_action_is_refused(argv, words, capsys, monkeypatch, tmp_path):
    """Issue 26 check: `demo pair --lan` and `demo restart --no-qr` ignored the flag; now exit 2 with why,
    before looking for a running demo (so the answer is the same with or without one)."""
    from collie.crew.cli import demo
    from collie.crew.cli.main import main

    monkeypatch.setattr(demo, "DEMO_ROOT", str(tmp_path))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("collie: ") and words in err and "no demo is running" not in err
    assert main(["demo", "pair", "--no-qr"]) == 1  # the flag pair takes is accepted: here no demo runs
    assert "no demo is running" in capsys.readouterr().err


def test_no_demo_running_names_collie_as_it_was_run(capsys, monkeypatch, tmp_path):
    """Issue 26 check: every command the demo prints names collie as it was run (a .venv path when it is not
    on PATH); "no demo is running: start one with `collie demo`" named bare `collie`."""
    from collie.crew.cli import demo
    from collie.crew.cli.main import main

    monkeypatch.setattr(demo, "DEMO_ROOT", str(tmp_path))
    venv_collie = tmp_path / "venv" / "bin" / "collie"
    venv_collie.parent.mkdir(parents=True)
    venv_collie.write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "argv", [str(venv_collie), "demo", "pair"])
    monkeypatch.setenv("PATH", "/nonexistent")
    for action in ("pair", "restart"):
        assert main(["demo", action]) == 1
        assert capsys.readouterr().err == f"collie: no demo is running: start one with `{venv_collie} demo`\n"


LOOP_LINK = {"link": "http://127.0.0.1:41237/pair#" + "k" * 32, "fingerprint": None, "loopback": True,
             "expires_at": 1_800_000_000.0}
LAN_LINK = {"link": "https://192.168.100.200:65535/pair#" + "k" * 32, "loopback": False, "expires_at": 1_800_000_000.0,
            "fingerprint": ":".join(f"{b:02X}" for b in range(32))}


@pytest.mark.parametrize("got", [LOOP_LINK, LAN_LINK], ids=["loopback", "lan"])
def test_the_qr_screen_fits_80x24_with_its_link_and_fingerprint_and_says_when_it_cannot(got):
    """Issue 26 check: on 80×24 the QR code, the whole link on one row, the certificate's fingerprint (--lan)
    and the keys fit one screen; a window too small for them says its size, what it needs and what to do."""
    from collie.crew.cli.demo import pair_rows, qr_screen

    rows, note = qr_screen(got, 80, 24, "/home/you/.venv/bin/collie")
    assert rows is not None and note == "" and len(rows) <= 24 and all(len(r) <= 80 for r in rows)
    assert f"  {got['link']}" in rows
    assert sum(r.startswith("█" * 30) for r in rows) >= 1 and rows[-2].startswith("▀" * 30)  # the whole code
    text = "\n".join(rows)
    assert "Any key: the live view" in text
    if got["fingerprint"]:  # beside the code, cut between bytes: every byte, in order
        side = [r[43:] for r in rows if len(r) > 43 and ":" in r[43:] and " " not in r[43:]]
        assert ":".join(side) == got["fingerprint"]
    small, note = qr_screen(got, 80, 15, "/home/you/.venv/bin/collie")
    assert small is None
    assert note.startswith(f"The QR code does not fit this window (80×15; it needs {len(rows)} rows at this width)")
    assert note.endswith("make the window taller and press p, or run `/home/you/.venv/bin/collie demo pair` in "
                         "another terminal.")
    narrow, note = qr_screen(got, 30, 80, "collie")
    assert narrow is None and ("it needs 37 columns" in note or "it needs 41 columns" in note)
    # the live view's top: the link on a row of its own at 80 columns, folded but whole when narrower
    top = pair_rows(got, "", 80)
    assert f"  {got['link']}" in top and all(len(r) <= 80 for r in top) and len(top) <= 5
    assert got["link"] in "".join(pair_rows(got, "", 20))
    assert pair_rows(None, "The pairing link expired. p: a new one.", 80) == ["The pairing link expired. p: a new one."]


class _Keys:
    on = True

    def close(self) -> None:
        pass


def test_the_qr_screen_is_not_redrawn_until_a_key_and_the_live_view_keeps_the_link(tmp_path):
    """Issue 26 check: `p`'s QR code was drawn over by the next redraw 0.3 s later. On an 80×24 terminal the
    demo's once-a-second draws leave the QR screen as it is; a key (hide_qr) brings the live view with the
    link at its top, on the alternate screen; a paired phone takes the link off and says so."""
    import io

    from rich.console import Console

    from collie.crew.cli.demo import RichScreen

    screen = RichScreen(keys=_Keys())
    out = io.StringIO()
    screen.console = Console(file=out, force_terminal=True, width=80, height=24, color_system=None)
    screen.ready("http://127.0.0.1:41237", tmp_path / "api-token")
    screen.live_view()
    screen.pairing(LOOP_LINK, qr=True, more="Another link: press p here.")
    assert screen.qr_shown and "▀" * 30 in out.getvalue()
    summary = Summary.from_api({"sections": [{"machine": "local", "online": True, "agents": []}]}, [], [],
                               machines=["local"], asleep=set())
    at = len(out.getvalue())
    for _ in range(5):  # five seconds of the demo's loop
        screen.draw(summary, [])
    assert len(out.getvalue()) == at
    screen.hide_qr()
    live = out.getvalue()[at:]
    assert "Machines" in live and f"  {LOOP_LINK['link']}" in live and "▀" * 30 not in live
    assert live.index(LOOP_LINK["link"]) < live.index("Machines")  # at the top
    at = len(out.getvalue())
    screen.link_done("A phone paired as Pixel. p: a link for another one.")
    after = out.getvalue()[at:]
    assert "A phone paired as Pixel." in after and LOOP_LINK["link"] not in after
    screen.close()
    assert "\x1b[?1049h" in out.getvalue() and out.getvalue().rstrip().endswith("\x1b[?1049l")


def test_with_no_qr_a_small_window_is_not_told_about_the_qr_code(tmp_path):
    """`collie demo --no-qr`: the live view keeps the link at its top, and says nothing of a QR code."""
    import io

    from rich.console import Console

    from collie.crew.cli.demo import RichScreen

    screen = RichScreen(keys=_Keys())
    out = io.StringIO()
    screen.console = Console(file=out, force_terminal=True, width=80, height=12, color_system=None)
    screen.ready("http://127.0.0.1:41237", tmp_path / "api-token")
    screen.live_view()
    screen.pairing(LOOP_LINK, qr=False, more="Another link: press p here.")
    text = out.getvalue()
    assert not screen.qr_shown and f"  {LOOP_LINK['link']}" in text and "QR code does not fit" not in text
    screen.pairing(LOOP_LINK, qr=True, more="Another link: press p here.")  # a QR code wanted, but 12 rows
    assert not screen.qr_shown and "The QR code does not fit this window (80×12; it needs 20 rows" in out.getvalue()
    screen.close()

"""What the real ACP agents' tests (tests/system/test_acp_real.py: Codex, Claude Code; tests/system/test_acp_vendors.py: the
npm registry's agents) check alike: Stop with a command's ask open, and a crash with one open."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.system.test_durable_e2e import wait_for

SLOW = 60.0  # a real agent's first start (node, the binary, Claude Code's own start) on a busy CI machine


def alive(pids) -> set[int]:
    """Those of `pids` still running (a zombie, exited but not yet reaped, is not)."""
    left = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            left.add(pid)
    return left


def stopped_mid_reply(phone) -> None:
    """Stop mid-reply (the model scripted to answer "think long" with a reply that hangs after its first
    chunk): the turn ends stopped and no item stays growing."""
    assert phone.send("think long")["outcome"] == "sent"
    wait_for(lambda: any(i["kind"] == "reply" and "Thinking" in i["text"] for i in phone.items()), timeout=SLOW,
             what="the first chunk")
    assert phone.stop()["outcome"] == "stopped"
    its = phone.turn_ended()
    assert [i for i in its if i["kind"] == "turn_end"][-1]["stopped"]
    wait_for(lambda: all(i.get("final", True) for i in phone.items()), what="every item final after the stop")


def stopped_with_an_ask_open(phone, never: Path) -> None:
    """Stop while the command's ask the phone waits for is open: the ask goes, ending `stopped` (not
    decided), the turn ends stopped, no call stays running, and the command (it writes `never`) did not run."""
    phone.ask()
    assert phone.stop()["outcome"] == "stopped"
    wait_for(lambda: phone.pane()["ask"] is None, what="the ask gone")
    its = phone.turn_ended()
    assert [i for i in its if i["kind"] == "turn_end"][-1]["stopped"]
    wait_for(lambda: all(t["status"] != "running" for t in phone.tools()), what="no call left running")
    assert [i["end"] for i in phone.items() if i["kind"] == "ask"] == ["stopped"]
    assert not never.exists()


def crashed_with_an_ask_open(phone, agent, main_of) -> list[dict]:
    """The agent's main process (`main_of(agent.tree())`) is SIGKILLed while the command's ask the phone
    waits for is open: every process of the agent goes, the turn ends with a notice that it exited, and
    the ask does not end `decided`. Returns that one ask item."""
    phone.ask()
    before = agent.tree()
    os.kill(main_of(before), signal.SIGKILL)
    wait_for(lambda: not alive(before), timeout=SLOW, what="every process of the crashed agent gone")
    its = phone.turn_ended()
    assert any("exited" in i["text"] for i in its if i["kind"] == "notice"), its
    asks = [i for i in its if i["kind"] == "ask"]
    assert len(asks) == 1 and asks[0]["end"] != "decided", asks
    return asks


def back_after_the_crash(phone, never: Path, reply: str = "Back again.") -> None:
    """After `crashed_with_an_ask_open`: no call stays running, the command (it writes `never`) did not
    run, and the restarted agent takes the next send (scripted "after the crash") and answers `reply`."""
    wait_for(lambda: all(t["status"] != "running" for t in phone.tools()), what="no call left running")
    assert not never.exists()
    wait_for(lambda: phone.send("after the crash")["outcome"] == "sent", timeout=SLOW, what="a send taken")
    phone.reply(reply)

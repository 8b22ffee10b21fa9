"""The testing kit's pytest fixtures (issue 28, docs/testing.md): the docs' example file passes as
written in a fresh project, the fixtures clean up every process they started, and scripted members
make the lead show what a real member's behaviour would (crew.md §2–§4, features B2–B5, I1, I2)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from collie.crew.receipts import REASONS
from collie.fixtures.pytest_plugin import collie_lead, collie_lead_pool, fake_agent, fake_member  # noqa: F401 (fixtures)
from tests.crewlab import REPO

DOC = REPO / "docs" / "testing.md"


def python_blocks(path: Path) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^```python\n(.*?)^```$", path.read_text(), re.S | re.M)]


def inner_pytest(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COLLIE_", "PYTEST_"))}
    env.pop("PYTHONPATH", None)  # as a user's project: Collie comes from the installed package
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=folder,
                          env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.slow
def test_the_docs_examples_pass_in_a_fresh_project_and_leave_no_process(tmp_path):
    """A user copies docs/testing.md's example files into a project of their own (no conftest, no
    settings) and runs `pytest --collie`: both pass, and every process the fixtures started is gone
    afterwards."""
    plain, trio_test = python_blocks(DOC)
    assert plain.strip() == (REPO / "docs" / "examples" / "test_crew_lab.py").read_text().strip()
    (tmp_path / "test_crew_lab.py").write_text(plain)
    (tmp_path / "test_trio_lab.py").write_text(trio_test)
    pids = tmp_path / "pids"
    (tmp_path / "test_pids.py").write_text(
        "def test_pids(collie_lead, fake_agent, fake_member):\n"
        "    agent = fake_agent('streamer')\n"
        "    fake_member('laptop')\n"
        f"    open({str(pids)!r}, 'w').write(f'{{collie_lead.process.pid}} {{agent.process.pid}}')\n")
    without = inner_pytest(tmp_path, "test_crew_lab.py")
    assert "fixture 'collie_lead' not found" in without.stdout  # opt-in: nothing without --collie
    by_ini = inner_pytest(tmp_path, "-o", "collie_fixtures=true", "test_crew_lab.py")
    assert by_ini.returncode == 0 and "1 passed" in by_ini.stdout, by_ini.stdout[-3000:]
    got = inner_pytest(tmp_path, "--collie")
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-2000:]
    assert "3 passed" in got.stdout
    for pid in map(int, pids.read_text().split()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def api_send(lead, machine: str, text: str, conversation: str = "c1", agent: str = "agent-1") -> dict:
    pane = lead.api.get(f"/api/agents/{machine}/{agent}/conversations/{conversation}").json()
    return lead.api.post("/api/send", json={"request_id": str(uuid.uuid4()), "machine": machine, "agent": agent,
                                            "conversation": conversation, "text": text, "turn": pane["turn"]}).json()


def test_without_collie_a_test_asking_for_the_fixtures_gets_a_hint(tmp_path):
    """D5: the fixtures are opt-in; a run that asked for one without `--collie` says how to turn them on."""
    (tmp_path / "test_lab.py").write_text("def test_lab(collie_lead):\n    pass\n")
    got = inner_pytest(tmp_path)
    assert "fixture 'collie_lead' not found" in got.stdout
    assert "hint: Collie's fixtures (collie_lead, fake_member, fake_agent) are opt-in: run pytest --collie" \
        in got.stdout
    (tmp_path / "test_lab.py").write_text("def test_lab(tmp_path):\n    assert False\n")
    assert "hint:" not in inner_pytest(tmp_path).stdout  # only when they were asked for


@pytest.mark.slow
def test_a_failed_test_keeps_the_leads_folder_and_shows_its_log_and_teardown_is_quick(tmp_path):
    """Issue 40: each test has a lead of its own (the next test sees no member of the last), started
    while the test before ran; its folder is kept after a failure (also as tmp_path/lead); the failed
    test's report shows the lead's log; `repr` names the URL; stopping a lead and two fake members
    takes well under the 2 s the fake link's close used to wait (pytest's own --durations figure)."""
    (tmp_path / "test_lab.py").write_text(
        "def test_fails(collie_lead, fake_member):\n"
        "    fake_member('laptop'); fake_member('studio')\n"
        "    assert False, repr(collie_lead)\n\n"
        "def test_next(collie_lead, fake_member):\n"
        "    assert collie_lead.members() == []  # nothing of the test before\n"
        "    fake_member('laptop')\n")
    got = inner_pytest(tmp_path, "--collie", "--durations=0", "--durations-min=0", "--basetemp", str(tmp_path / "bt"))
    assert "1 failed, 1 passed" in got.stdout, got.stdout
    assert re.search(r"collie lead log \(.*/bt/lead0\)", got.stdout), got.stdout
    assert "[bridge] Collie" in got.stdout and " ready (pid " in got.stdout  # the log's lines, in the report
    assert re.search(r"AssertionError: <collie lead http://127\.0\.0\.1:\d+ running, home ", got.stdout)
    assert (tmp_path / "bt" / "test_fails0" / "lead" / "state" / "bridge.log").exists()  # kept, by tmp_path too
    teardown = float(re.search(r"^([\d.]+)s teardown\s+test_lab.py::test_fails$", got.stdout, re.M).group(1))
    assert teardown < 1.0, got.stdout  # 2.0 s before: a bound an order of magnitude above today's 0.04 s


@pytest.mark.slow
def test_an_answer_is_recorded_with_its_conversation_and_the_option_chosen(collie_lead, fake_member):
    """Issue 40: a test can check that Deny was sent: the member's record of an answer names the ask's
    conversation, the ask and the chosen option (the default ask's options are `yes` allow, `no` deny)."""
    m = fake_member("laptop")
    m.raise_ask("agent-1", "c2", title="Deploy?")
    pane = collie_lead.wait_for(lambda: (p := collie_lead.api.get(
        "/api/agents/laptop/agent-1/conversations/c2").json())["asks"] and p["asks"][0])
    assert [(o["id"], o["role"]) for o in pane["options"]] == [("yes", "allow"), ("no", "deny")]
    got = collie_lead.api.post(f"/api/ask/{pane['id']}", json={
        "request_id": str(uuid.uuid4()), "machine": "laptop", "agent": "agent-1", "digest": pane["digest"],
        "answer": {"option_ids": ["no"]}}).json()
    assert got["outcome"] == "accepted"
    seen = m.wait_request(op="answer")
    assert (seen.conversation, seen.ask_id, seen.options, seen.outcome) == ("c2", pane["id"], ("no",), "accepted")


@pytest.mark.slow
def test_chosen_receipts_reach_the_api_as_the_member_gave_them(collie_lead, fake_member):
    """A scripted refusal (with its reason's sentence), an `unknown`, and a receipt that does not fit
    the crew wire (`unknown`, reason `protocol`) are what the lead's API answers; a refusal changed
    nothing at the agent (B2, B3, crew.md "The lead trusts no frame")."""
    m = fake_member("laptop")
    m.rules({"op": "rename", "receipt": {"outcome": "refused", "reason": "disabled"}, "times": 1},
            {"op": "rename", "text": "x", "receipt": "malformed"},
            {"op": "rename", "receipt": {"outcome": "unknown", "reason": "internal"}, "times": 1})

    def rename(title: str) -> dict:
        return collie_lead.api.post("/api/agents/laptop/agent-1/conversations/c2/rename",
                                    json={"request_id": str(uuid.uuid4()), "title": title, "turn": 1}).json()

    first = rename("First")
    assert (first["outcome"], first["reason"], first["text"]) == ("refused", "disabled", REASONS["disabled"])
    assert m.member.agent("agent-1").conversation("c2").title == "Conversation 2"
    assert (rename("x marks")["outcome"], rename("x again")["reason"]) == ("unknown", "protocol")
    assert rename("Third")["outcome"] == "unknown"
    assert rename("Fourth")["outcome"] == "done"
    assert [(s.op, s.outcome) for s in m.requests] == [("rename", "refused"), ("rename", None), ("rename", None),
                                                        ("rename", "unknown"), ("rename", "done")]


@pytest.mark.slow
def test_a_streamed_reply_keeps_the_turn_running_until_its_last_chunk(collie_lead, fake_member):
    """A send answered with a streamed reply: the phone sees the turn working and the reply growing,
    then the reply final and the conversation idle (wire §5)."""
    m = fake_member("laptop", script={"requests": [
        {"op": "send", "stream": {"chunks": ["Reading ", "the code", ", done."], "every": 0.3}}]})
    assert api_send(collie_lead, "laptop", "explain it")["outcome"] == "sent"
    path = "/api/agents/laptop/agent-1/conversations/c1"
    assert collie_lead.wait_for(lambda: collie_lead.api.get(path).json()["state"] == "working")
    items = collie_lead.wait_for(lambda: [i for i in collie_lead.api.get(f"{path}/items").json()["items"]
                                          if i["kind"] == "reply" and i.get("final")])
    assert items[-1]["text"] == "Reading the code, done."
    assert collie_lead.wait_for(lambda: collie_lead.api.get(path).json()["state"] == "idle")


@pytest.mark.slow
def test_bad_frames_are_ignored_and_a_huge_one_costs_the_link_only(collie_lead, fake_member):
    """Frames that do not fit the crew wire are logged (escaped) and ignored, the member stays online;
    a frame over 1 MiB closes its link, the member comes back, and the other member never left."""
    m, other = fake_member("laptop"), fake_member("desk")
    m.step("malformed", kind="type", count=3)
    collie_lead.wait_for(lambda: "a frame that does not fit the crew wire was ignored" in collie_lead.log())
    assert "\\x1b" in collie_lead.log() and "\x1b" not in collie_lead.log()
    assert collie_lead.online("laptop") and m.member.connects == 1
    m.step("malformed", kind="huge")
    collie_lead.wait_for(lambda: m.member.connects == 2 and collie_lead.online("laptop"), what="laptop back")
    assert other.member.connects == 1 and collie_lead.online("desk")


@pytest.mark.slow
def test_a_fake_agent_attached_to_the_lead_beside_fake_members(collie_lead, fake_agent, fake_member):
    """`fake_agent` runs a fixture agent on a private socket; attached, the lead shows it as its own
    (machine `local`), and a member that joined before the lead restarted comes back by itself."""
    m = fake_member("laptop")
    agent = fake_agent("streamer")
    assert oct(agent.socket.parent.stat().st_mode & 0o777) == "0o700"
    collie_lead.attach("desk", agent)
    m.wait_joined()

    def sections():
        return {s["machine"]: [a["status"] for a in s["agents"]]
                for s in collie_lead.api.get("/api/dashboard").json()["sections"]}
    assert collie_lead.wait_for(lambda: sections() == {"local": ["ready"], "laptop": ["ready", "ready"]} and True)
    assert m.member.connects == 2


@pytest.mark.slow
def test_going_offline_queues_writes_and_a_restarted_member_resumes_them(collie_lead, fake_member):
    """Offline: a session-bound write fails at once with `machine_offline`, a send waits in the inbox;
    the member back as a restarted process (a new boot) gets the send once (crew.md "Writes", I2)."""
    m = fake_member("laptop")
    m.offline()
    stop = collie_lead.api.post("/api/agents/laptop/agent-1/conversations/c1/rename",
                                json={"request_id": str(uuid.uuid4()), "title": "x", "turn": 1}).json()
    assert (stop["outcome"], stop["reason"]) == ("refused", "machine_offline")
    queued = api_send(collie_lead, "laptop", "later")
    assert queued["outcome"] == "queued"
    m.online(restart=True)
    assert m.wait_request(op="send").text == "later"
    collie_lead.wait_for(lambda: collie_lead.api.get(f"/api/inbox/{queued['request_id']}").json()["state"] == "done")
    assert [s.op for s in m.requests] == ["send"]


@pytest.mark.slow
def test_a_slow_receipt_holds_the_conversation_busy_on_the_lead(collie_lead, fake_member):
    """A scripted slow answer (`delay`): while the member has not answered, the lead holds that
    conversation's lock, so a second write to it is refused `busy` at once and never reaches the member
    (features B7, crew.md "Writes"); the slow one then gets the member's receipt."""
    import threading

    m = fake_member("laptop", script={"requests": [{"op": "rename", "text": "slow", "delay": 3}]})
    got: dict = {}

    def rename(title: str) -> dict:
        return collie_lead.api.post("/api/agents/laptop/agent-1/conversations/c1/rename",
                                    json={"request_id": str(uuid.uuid4()), "title": title, "turn": 1}).json()
    slow = threading.Thread(target=lambda: got.setdefault("slow", rename("slow")))
    slow.start()
    collie_lead.wait_for(lambda: m.in_flight)  # the slow one reached the member and waits there
    second = rename("fast")
    slow.join(20)
    assert (second["outcome"], second["reason"]) == ("refused", "busy")
    assert got["slow"]["outcome"] == "done"
    assert [(s.text, s.outcome) for s in m.requests] == [(None, "done")]  # the refused one never arrived
    assert m.member.agent("agent-1").conversation("c1").title == "slow"


@pytest.mark.slow
def test_a_send_to_a_conversation_left_out_of_the_view_is_delivered(collie_lead, fake_member):
    """D1 (issue 28, crew.md §3, issue 32): a member with more open conversations than a view carries shows
    the lead 200 and says how many it left out; a send to one the lead does not see, quoting no turn,
    reaches the agent — the member quotes its own current turn — as with a real member."""
    m = fake_member("laptop", agents=1, conversations=231)
    listed = collie_lead.api.get("/api/agents/laptop/agent-1/conversations").json()
    assert (len(listed["open"]), listed["left_out"]) == (200, 31) and "c1" not in [c["id"] for c in listed["open"]]
    got = collie_lead.api.post("/api/send", json={"request_id": str(uuid.uuid4()), "machine": "laptop",
                                                 "agent": "agent-1", "conversation": "c1", "text": "hidden"}).json()
    assert (got["outcome"], got.get("reason")) == ("sent", None), got
    assert m.wait_request(op="send").outcome == "sent"
    assert m.member.agent("agent-1").conversation("c1").turn == 2


@pytest.mark.slow
def test_an_open_ask_refuses_a_send_passing_through_and_holds_one_that_waits(collie_lead, fake_member):
    """D4 (docs/crew.md "The inbox", features B4, I1): with an ask open, the owner's send to an empty inbox
    passes straight through and is refused `ask_open` at once by the owning member (nothing is applied); an API token's
    send waits `queued, waiting: an ask is open` and goes once the ask closes."""
    import httpx

    m = fake_member("laptop")
    m.raise_ask("agent-1", "c1", title="Deploy?")
    api = collie_lead.api
    assert collie_lead.wait_for(lambda: api.get("/api/agents/laptop/agent-1/conversations/c1").json().get("ask"))
    now = api.post("/api/agents/laptop/agent-1/inbox", json={"request_id": str(uuid.uuid4()), "conversation": "c1",
                                                              "text": "owner"}).json()
    assert (now["outcome"], now["reason"]) == ("refused", "ask_open")
    assert api.get(f"/api/inbox/{now['item']}").json()["state_text"] == "failed: ask_open"
    made = collie_lead.collie("tokens", "create", "relay", "--approval", "standing")
    token = Path(re.search(r"the token is in (\S+)", made.stdout).group(1)).read_text().strip()
    with httpx.Client(base_url=collie_lead.url, headers={"authorization": f"Bearer {token}"}, timeout=30) as relay:
        held = relay.post("/api/agents/laptop/agent-1/inbox", json={"request_id": str(uuid.uuid4()),
                                                                  "conversation": "c1", "text": "relay"}).json()
        assert (held["outcome"], held["text"]) == ("queued", "queued, waiting: an ask is open")
        m.close_ask("agent-1", "c1")
        assert m.wait_request(op="send", text="relay").outcome == "sent"
        assert collie_lead.wait_for(lambda: relay.get(f"/api/inbox/{held['item']}").json()["state"] == "done")
    assert [(s.text, s.outcome) for s in m.requests] == [("owner", "refused"), ("relay", "sent")]


@pytest.mark.slow
def test_many_members_start_together_and_each_is_its_own_machine(collie_lead, fake_member):
    """`fake_member.many(K)`: LABEL-1 … LABEL-K online together, each a dashboard section of its own."""
    lab = fake_member.many(5, label="lab", agents=1, conversations=2)
    assert [m.label for m in lab] == [f"lab-{i}" for i in range(1, 6)]
    sections = collie_lead.api.get("/api/dashboard").json()["sections"]
    assert sorted((s["machine"], s["online"], len(s["agents"])) for s in sections) == [
        (f"lab-{i}", True, 1) for i in range(1, 6)]

"""`python -m collie.fixtures member` (issue 28, docs/testing.md "Labs"): K members in one process join a
real lead through `collie crew invite`'s own path, one line each; Ctrl-C ends it quietly with a summary
of the requests received; a single member takes its token from a variable that is never printed; a
script drives what the lead shows; mistakes are refused before anything joins."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid

import pytest

from collie.fixtures.pytest_plugin import collie_lead, collie_lead_pool  # noqa: F401 (fixtures)
from tests.crewlab import REPO
from tests.procs import LIMIT, ended, readline


def start(lead, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "collie.fixtures", "member", "--lead", lead.ws_url.removesuffix("/crew/v1"),
                             *args], cwd=REPO, env={**lead.env, "PYTHONPATH": str(REPO), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def interrupt(proc: subprocess.Popen) -> tuple[int, str, str]:
    """Ctrl-C, then what it printed once it ended (every test calls this in a `finally`: the member never
    outlives its test, and its pipes are closed)."""
    proc.send_signal(signal.SIGINT)
    out, err = ended(proc, "python -m collie.fixtures member after Ctrl-C")
    return proc.returncode, out, err


def read_lines(proc: subprocess.Popen, n: int) -> list[str]:
    return [readline(proc, "python -m collie.fixtures member").strip() for _ in range(n)]


@pytest.mark.slow
def test_a_lab_run_again_with_invite_reuses_its_labels_and_crew_remove_takes_many(collie_lead):
    """Issue 40: a lab stopped and started again with the same `--invite` labels joins again (the labels
    that joined before and are offline now are invited anew); `collie crew remove` takes many labels, or
    every offline member, in one call, and an unknown label removes nothing."""
    for run in (1, 2):
        proc = start(collie_lead, "--invite", "--label", "lab", "--count", "2", "--agents", "1", "--conversations", "1")
        try:
            lines = read_lines(proc, 2)
            assert sorted(line.split(":")[0] for line in lines) == ["joined lab-1", "joined lab-2"], (run, lines)
        finally:
            code, out, err = interrupt(proc)
        assert code == 0 and err == "", (run, err)
    collie_lead.wait_for(lambda: not any(m["online"] for m in collie_lead.members()))
    assert collie_lead.invite("keep")  # invited, never joined: offline too
    refused = collie_lead.collie("crew", "remove", "lab-1", "nobody")
    assert refused.returncode == 1 and "no member named 'nobody': nothing removed" in refused.stderr
    gone = collie_lead.collie("crew", "remove", "--offline")
    assert gone.returncode == 0 and "removed 3 members (" in gone.stdout, gone.stdout + gone.stderr
    assert collie_lead.members() == [] and "no members" in collie_lead.collie("crew", "list").stdout


@pytest.mark.slow
def test_k_members_join_through_invite_and_ctrl_c_ends_quietly_with_a_summary(collie_lead):
    proc = start(collie_lead, "--invite", "--label", "lab", "--count", "3", "--agents", "2", "--conversations", "4")
    try:
        lines = read_lines(proc, 3)
        assert sorted(line.split(":")[0] for line in lines) == ["joined lab-1", "joined lab-2", "joined lab-3"]
        assert all(": 2 agents, 8 open conversations (" in line for line in lines)
        collie_lead.wait_for(lambda: sorted((m["label"], m["online"], m["agents"]) for m in collie_lead.members())
                             == [("lab-1", True, 2), ("lab-2", True, 2), ("lab-3", True, 2)])
        assert not list((collie_lead.paths.state_dir / "invites").iterdir())  # the lead deleted them on join
        rid = str(uuid.uuid4())
        got = collie_lead.api.post("/api/send", json={"request_id": rid, "machine": "lab-2", "agent": "agent-2",
                                                     "conversation": "c3", "text": "hi", "turn": 1}).json()
        assert got["outcome"] == "sent"
    finally:
        code, out, err = interrupt(proc)
    assert code == 0 and err == ""
    assert out.splitlines()[-4:] == ["lab-1: 0 requests", "lab-2: 1 request (send sent 1)", "lab-3: 0 requests",
                                     "3 members, 1 request in all"]


@pytest.mark.slow
def test_one_member_with_its_token_in_a_variable_never_prints_it_and_a_script_drives_it(collie_lead):
    token = collie_lead.invite("desk")
    script = collie_lead.home / "script.json"
    script.write_text(json.dumps({"timeline": [{"do": "ask", "title": "Ship it?"},
                                               {"after": 0.5, "do": "drop", "for": 1}]}))
    proc = start(collie_lead, "--token-env", "LAB_TOKEN", "--label", "desk", "--script", str(script),
                 env={"LAB_TOKEN": token})
    try:
        assert read_lines(proc, 1)[0].startswith("joined desk: 2 agents, 6 open conversations")
        pane = collie_lead.wait_for(
            lambda: collie_lead.api.get("/api/agents/desk/agent-1/conversations/c1").json().get("ask"))
        assert pane["title"] == "Ship it?"
        assert read_lines(proc, 1)[0].startswith("back desk: ")  # dropped its link, came back
        collie_lead.wait_for(lambda: collie_lead.online("desk"))
        assert collie_lead.api.get("/api/agents/desk/agent-1/conversations/c1").json()["ask"]["title"] == "Ship it?"
    finally:
        code, out, err = interrupt(proc)
    assert code == 0 and token not in out + err + collie_lead.log()


@pytest.mark.slow
@pytest.mark.parametrize("args, error", [
    (["--token-env", "T", "--label", "a", "--count", "2"], "--token-env gives one member's token"),
    (["--token-env", "UNSET_VAR_FOR_TEST", "--label", "a"], "the variable UNSET_VAR_FOR_TEST is not set"),
    (["--invite", "--label", "Bad Label"], "breaks the name rule"),
    (["--invite", "--label", "a", "--agents", "101"], "--agents is from 0 to 100"),
    (["--invite", "--label", "a", "--conversations", "1001"], "--conversations is from 0 to 1000"),
    (["--invite", "--label", "a", "--script", "/nonexistent.json"], "cannot read the script"),
    (["--invite", "--label", "a", "--script", "SNED"], "requests[0].op 'sned' is not a write the lead sends"),
])
def test_mistakes_are_refused_before_anything_joins(collie_lead, args, error):
    if "SNED" in args:  # D3: a request rule for an op the lead never sends is a typo, refused like a bad `do`
        script = collie_lead.home / "sned.json"
        script.write_text(json.dumps({"requests": [{"op": "sned", "receipt": {"outcome": "unknown"}}]}))
        args = [str(script) if a == "SNED" else a for a in args]
    proc = start(collie_lead, *args)
    out, err = ended(proc, "python -m collie.fixtures member refusing its options")
    assert proc.returncode == 2 and error in err
    assert collie_lead.members() == []


def test_a_lead_off_loopback_needs_wss(tmp_path):
    got = subprocess.run([sys.executable, "-m", "collie.fixtures", "member", "--lead", "ws://10.1.2.3:8470", "--invite",
                          "--label", "a"], cwd=REPO, capture_output=True, text=True, timeout=LIMIT,
                         env={**os.environ, "COLLIE_STATE_DIR": str(tmp_path)})
    assert got.returncode == 2 and "wss://" in got.stderr
    assert not (tmp_path / "crew.sqlite").exists()  # nobody was invited


@pytest.mark.parametrize("lead", ["ftp://127.0.0.1:8470", "127.0.0.1:8470"])
def test_a_lead_address_of_another_scheme_is_refused_naming_every_accepted_one(tmp_path, lead):
    """D5: https:// and http:// (to this machine) work too, so the refusal names them beside wss:// and ws://."""
    got = subprocess.run([sys.executable, "-m", "collie.fixtures", "member", "--lead", lead, "--invite", "--label", "a"],
                         cwd=REPO, capture_output=True, text=True, timeout=LIMIT,
                         env={**os.environ, "COLLIE_STATE_DIR": str(tmp_path)})
    assert got.returncode == 2
    assert "the lead address must start with https:// or wss:// (http:// or ws:// only to this machine)" in got.stderr


@pytest.mark.slow
def test_more_conversations_than_a_view_carries_rehearse_a_cut_list(collie_lead):
    """D5 (crew.md §6): `--conversations` goes past the 200 a view carries, as far as the pytest plugin
    (1000); the lead lists 200 and a footer for the rest, as for a real member with that many."""
    proc = start(collie_lead, "--invite", "--label", "big", "--agents", "1", "--conversations", "231")
    try:
        assert read_lines(proc, 1)[0].startswith("joined big: 1 agents, 231 open conversations (")
        def conversations():  # the member may be online a moment before its agent's view is in (a 404 then)
            got = collie_lead.online("big") and collie_lead.api.get("/api/agents/big/agent-1/conversations").json()
            return got if got and "open" in got else None
        listed = collie_lead.wait_for(conversations)
        assert (len(listed["open"]), listed["left_out"]) == (200, 31)
    finally:
        code, out, err = interrupt(proc)
    assert code == 0 and err == ""
    assert out.splitlines()[-2:] == ["big: 0 requests", "1 member, 0 requests in all"]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def trouble_line(proc: subprocess.Popen, timeout: float = LIMIT) -> str:
    """The next line on stderr ("" when none came within `timeout`: the process said nothing)."""
    import select

    ready, _, _ = select.select([proc.stderr], [], [], timeout)
    return proc.stderr.readline().strip() if ready else ""


@pytest.mark.slow
def test_a_member_that_cannot_reach_the_lead_says_so_and_never_joined():
    """D2: nothing listening at the address: one line saying so (not one per retry), and Ctrl-C's summary
    says the member never joined and why."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "collie.fixtures", "member", "--lead", f"ws://127.0.0.1:{port}",
                             "--token-env", "LAB_TOKEN", "--label", "lab-1"], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO), "LAB_TOKEN": "t" * 43},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        said = trouble_line(proc)
    finally:
        code, out, err = interrupt(proc)
    where = f"cannot reach the lead at ws://127.0.0.1:{port}/crew/v1: connection refused"
    assert said == f"lab-1: {where}; retrying"
    assert code == 1 and err.strip() == ""  # never joined: exit 1; no second line for the same failure
    lines = out.splitlines()
    assert re.fullmatch(rf"lab-1: never joined \(\d+ tr(y|ies): {re.escape(where)}\)", lines[-2]), lines
    assert lines[-1] == "1 member, 0 requests in all; 1 never joined"


@pytest.mark.slow
def test_a_member_the_lead_refuses_is_told_to_check_its_token(collie_lead):
    """D2: a wrong token: the lead logs `unauthorized` and the member says the lead refused it."""
    proc = start(collie_lead, "--token-env", "LAB_TOKEN", "--label", "lab-1", env={"LAB_TOKEN": "w" * 43})
    try:
        said = trouble_line(proc)
        collie_lead.wait_for(lambda: "refused a member link: unauthorized" in collie_lead.log())
    finally:
        code, out, err = interrupt(proc)
    assert said == ("lab-1: the lead refused this member (unauthorized): check the token (a wrong or removed "
                    "member token; `collie crew invite --label lab-1` on the lead makes a new one); retrying")
    assert code == 1 and err.strip() == "" and "w" * 43 not in out + said
    assert out.splitlines()[-2].startswith("lab-1: never joined (")


@pytest.mark.slow
def test_https_at_a_plain_http_lead_says_the_scheme_may_be_wrong(collie_lead):
    """D2: https:// to a lead that serves plain HTTP: the TLS handshake gets no answer; the member says so
    and names the address to use."""
    plain = collie_lead.ws_url.removesuffix("/crew/v1").replace("ws://", "https://")
    proc = subprocess.Popen([sys.executable, "-m", "collie.fixtures", "member", "--lead", plain, "--invite", "--label",
                             "lab-1"], cwd=REPO, env={**collie_lead.env, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        said = trouble_line(proc)
    finally:
        code, out, err = interrupt(proc)
    assert said == (f"lab-1: cannot reach the lead at {plain.replace('https://', 'wss://')}/crew/v1: no TLS answer "
                    "(does the lead serve plain HTTP? then its address is http:// or ws://, on this machine only); "
                    "retrying")
    assert code == 1  # it never joined


@pytest.mark.slow
def test_a_member_joins_a_tls_lead_trusting_its_ca_through_ssl_cert_file(tmp_path):
    """A lab against a lead that serves TLS (as every lead off loopback does): the fake member dials
    wss:// and trusts the lead's CA through SSL_CERT_FILE."""
    import trustme

    from collie.fixtures.pytest_plugin import Lead, _private_dir

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "lead.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "lead.key"))
    home = _private_dir("collie-tls-")
    lead = Lead(home, ("--tls-cert", str(tmp_path / "lead.pem"), "--tls-key", str(tmp_path / "lead.key")))
    lead.start()
    try:
        assert lead.url.startswith("https://")
        proc = start(lead, "--invite", "--label", "far", env={"SSL_CERT_FILE": str(tmp_path / "ca.pem")})
        try:
            assert read_lines(proc, 1)[0].startswith("joined far: ")
            lead.wait_for(lambda: lead.online("far"))
        finally:
            code, _out, err = interrupt(proc)
        assert code == 0 and err == ""
    finally:
        lead.close()
        import shutil
        shutil.rmtree(home, ignore_errors=True)

"""Docs that run as written (issue 10.8): every shell and Python example in docs/*.md runs, or says why not.

A fenced block tagged `sh`, `bash`, `shell`, `python` or `py` is an example. It runs unless the line
before it is an HTML comment `<!-- not-runnable: <reason> -->`; those are skipped with their reason,
so `pytest -ra` lists them. Each runnable block gets a fresh temporary HOME (no COLLIE_* or XDG_*
variables from the outside, `XDG_RUNTIME_DIR` a private folder in it) and a lead bridge started there
with its default folders, so `~/.local/state/collie/api-token` in an example is that bridge's. The
bridge listens on a free port; an example's `127.0.0.1:8470` (the documented default) stands for it,
so a test never touches a bridge you run yourself. The repository is the working folder and the
test's virtual environment comes first on PATH (`collie`, `python`).

A block that prints a line `listening <socket>` is an agent: the test attaches it with
`collie durable attach`, waits for the lead to show it ready, answers its first open ask with the first
option through the API, and then expects it to exit 0 by itself (printing the option's id) or to stop
on Ctrl-C. A Python block that is a file in docs/examples/ runs as that file, the way the docs say.

Other checks: docs/ stands alone (no path into a spec folder a clone does not have, every relative link
resolves, every feature id cited is explained in docs/features.md); markdown tables do not break; the
fixture agents are described in `python -m collie.fixtures --help` and docs/fixtures.md.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import attrs
import httpx
import pytest

from collie.crew import control
from collie.crew.errors import CollieError
from collie.crew.paths import Paths
from tests.crewlab import REPO, wait_for

DOCS = REPO / "docs"
SHELL = {"sh", "bash", "shell"}
PYTHON = {"python", "py"}
MARKER = re.compile(r"^<!--\s*not-runnable:\s*(.*?)\s*-->$")
DEFAULT_ADDRESS = "127.0.0.1:8470"
BLOCK_TIMEOUT = 60.0


@attrs.frozen
class Block:
    doc: str
    line: int
    lang: str
    text: str
    not_runnable: str | None

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    found, lines = [], path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1).lower()
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        before = next((lines[k].strip() for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        marker = MARKER.match(before)
        found.append(Block(path.name, start + 1, lang, "\n".join(lines[start + 1:j]) + "\n",
                           marker.group(1) if marker else None))
        i = j + 1
    return found


ALL_BLOCKS = [b for p in sorted(DOCS.glob("*.md")) for b in blocks_of(p)]
EXAMPLES = [b for b in ALL_BLOCKS if b.lang in SHELL | PYTHON]


def test_every_marker_gives_a_reason_and_sits_on_an_example():
    """A `not-runnable` marker says why, and marks a shell or Python block (never prose or a JSON sample)."""
    for path in sorted(DOCS.glob("*.md")):
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines):
            if "not-runnable" not in line:
                continue
            m = MARKER.match(line.strip())
            assert m and m.group(1), f"{path.name}:{n + 1}: write <!-- not-runnable: why -->"
            nxt = next((x for x in lines[n + 1:] if x.strip()), "")
            lang = nxt[3:].strip().lower() if nxt.startswith("```") else None
            assert lang in SHELL | PYTHON, f"{path.name}:{n + 1}: the marker must sit right before a shell or Python block"
    assert EXAMPLES, "no examples found: the parser is broken"


# --- running an example -------------------------------------------------------------------------------
class Sandbox:
    """A temporary HOME with a lead bridge serving from its default folders."""

    def __init__(self, venv_active: bool = True) -> None:
        """`venv_active=False`: a fresh clone's shell — `collie` found on PATH (linked into a folder of its
        own, as a user links `.venv/bin/collie`), but no `python` of the virtual environment before the
        system's, and no PYTHONPATH."""
        self.root = Path(tempfile.mkdtemp(prefix="docs-", dir="/tmp"))
        os.chmod(self.root, 0o700)
        self.home = self.root / "home"
        self.runtime = self.root / "run"
        for d in (self.home, self.runtime):
            d.mkdir(mode=0o700)
        venv_bin = str(REPO / ".venv" / "bin") if (REPO / ".venv" / "bin" / "collie").exists() else None
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("COLLIE_", "XDG_"))}
        if venv_active:
            path = [p for p in (venv_bin, str(Path(sys.executable).parent), os.environ.get("PATH", "")) if p]
            self.env.update(PYTHONPATH=str(REPO))
        else:
            own = self.root / "bin"
            own.mkdir(mode=0o700)
            (own / "collie").symlink_to(Path(venv_bin or Path(sys.executable).parent) / "collie")
            ours = {venv_bin, str(Path(sys.executable).parent)}
            path = [str(own), *(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p not in ours)]
            self.env.pop("PYTHONPATH", None)
            self.env.pop("VIRTUAL_ENV", None)
        self.env.update(HOME=str(self.home), XDG_RUNTIME_DIR=str(self.runtime), PATH=os.pathsep.join(path))
        self.paths = Paths.from_env(self.env)
        self.bridge: subprocess.Popen | None = None
        self.address = ""

    def collie(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "collie.crew.cli.main", *argv], cwd=REPO, env=self.env,
                              capture_output=True, text=True, timeout=60)

    def start(self) -> None:
        self.bridge = subprocess.Popen([sys.executable, "-m", "collie.crew.cli.main", "serve", "--port", "0"], cwd=REPO,
                                       env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def up():
            assert self.bridge.poll() is None, f"the bridge exited {self.bridge.returncode}"
            try:
                return control.call(self.paths.control_socket, "ping", timeout=1)
            except CollieError:
                return None
        self.address = wait_for(up, what="the docs' bridge")["address"]

    def client(self) -> httpx.Client:
        token = (self.paths.state_dir / "api-token").read_text().strip()
        return httpx.Client(base_url=self.address, headers={"authorization": f"Bearer {token}"}, timeout=10)

    def close(self) -> None:
        if self.bridge is not None and self.bridge.poll() is None:
            self.bridge.terminate()
            try:
                self.bridge.wait(10)
            except subprocess.TimeoutExpired:
                self.bridge.kill()
                self.bridge.wait()
        # a block may have restarted the bridge: stop whatever answers on this HOME's control socket
        try:
            pid = control.call(self.paths.control_socket, "ping", timeout=1)["pid"]
            os.kill(pid, signal.SIGTERM)
        except (CollieError, ProcessLookupError, KeyError):
            pass
        shutil.rmtree(self.root, ignore_errors=True)


class Running:
    """A started example: its output, line by line, with timeouts."""

    def __init__(self, argv: list[str], env: dict) -> None:
        self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next_line(self, timeout: float) -> str | None:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            return None
        if line is not None:
            self.output.append(line)
        return line

    def finish(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.next_line(0.1) is None and self.proc.poll() is not None:
                break
        return self.proc.poll()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.reader.join(5)
        self.proc.stdout.close()

    def text(self) -> str:
        return "".join(self.output)


def command_for(block: Block, sandbox: Sandbox) -> list[str]:
    port = sandbox.address.rsplit(":", 1)[1]
    if block.lang in SHELL:
        script = block.text.replace(DEFAULT_ADDRESS, f"127.0.0.1:{port}")
        return ["bash", "-e", "-o", "pipefail", "-c", script]
    for example in sorted((DOCS / "examples").glob("*.py")):
        if example.read_text().strip() == block.text.strip():
            python = REPO / ".venv" / "bin" / "python"
            return [str(python if python.exists() else sys.executable), str(example.relative_to(REPO))]
    script = sandbox.root / f"block-{block.line}.py"
    script.write_text(block.text)
    return [sys.executable, str(script)]


def drive_agent(sandbox: Sandbox, run: Running, socket_path: str) -> None:
    """Attach the agent the example started, wait for it on the lead, answer its first ask."""
    name = re.sub(r"[^a-z0-9-]", "-", Path(socket_path).parent.name.lower())[:32].strip("-") or "example"
    attached = sandbox.collie("durable", "attach", name, "--socket", socket_path, "--restart")
    assert attached.returncode == 0, attached.stderr
    sandbox.address = control.call(sandbox.paths.control_socket, "ping")["address"]
    with sandbox.client() as c:
        def row():
            for s in c.get("/api/dashboard").json()["sections"]:
                for a in s["agents"]:
                    if a["name"] == name and a["status"] == "ready":
                        return a
            return None
        agent = wait_for(row, what=f"the lead shows {name} ready")
        if not agent["waiting"]:
            return
        conv = next(r for r in c.get(f"/api/agents/local/{name}/conversations").json()["open"] if r["waiting"])
        ask = c.get(f"/api/agents/local/{name}/conversations/{conv['id']}").json()["ask"]
        option = ask["options"][0]["id"]
        got = c.post(f"/api/ask/{ask['id']}", json={"request_id": f"docs-{os.getpid()}-{time.time_ns()}",
                                                    "machine": "local", "agent": name, "digest": ask["digest"],
                                                    "answer": {"option_ids": [option]}}).json()
        assert got["outcome"] == "accepted", got
        code = run.finish(10)
        if code is not None:
            assert code == 0, run.text()
            assert option in run.text(), f"the agent did not print its answer: {run.text()}"
        # issue 36: an agent that was answered (and may have exited since) leaves no ghost ask behind: not in
        # Needs you, not on its conversation
        needs = c.get("/api/needs").json()
        assert not [a for a in needs["asks"] + needs["unreachable"] if a["agent"] == name], needs
        assert c.get(f"/api/agents/local/{name}/conversations/{conv['id']}").json().get("ask") is None


@pytest.mark.slow
@pytest.mark.parametrize("block", EXAMPLES, ids=[b.id for b in EXAMPLES])
def test_example_runs_as_written(block: Block):
    """Every shell and Python example in docs/*.md runs as written (exit 0), or is marked with why not."""
    run_block(block, Sandbox())


# the quick starts a new user runs first, from a fresh clone whose virtual environment is not active (issue 36)
FRESH = [b for b in EXAMPLES if b.id.startswith("acp.md:") and "collie acp run --name demo" in b.text]


@pytest.mark.slow
@pytest.mark.parametrize("block", FRESH, ids=[b.id for b in FRESH])
def test_quick_start_runs_without_the_virtual_environment_active(block: Block):
    """acp.md's quick start runs as written with `collie` on PATH but the virtual environment not active
    (`python` is the system's, which lacks the ACP package): it names the environment's Python itself."""
    run_block(block, Sandbox(venv_active=False))


def run_block(block: Block, sandbox: Sandbox) -> None:
    if block.not_runnable:
        sandbox.close()
        pytest.skip(f"{block.id} not runnable: {block.not_runnable}")
    run = None
    try:
        sandbox.start()
        run = Running(command_for(block, sandbox), sandbox.env)
        deadline = time.monotonic() + BLOCK_TIMEOUT
        while (line := run.next_line(max(0.0, deadline - time.monotonic()))) is not None:
            if line.startswith("listening /"):
                drive_agent(sandbox, run, line.split(" ", 1)[1].strip())
                return
        code = run.finish(max(1.0, deadline - time.monotonic()))
        assert code is not None, f"{block.id} still runs after {BLOCK_TIMEOUT:g} s: {run.text()[-2000:]}"
        assert code == 0, f"{block.id} exited {code}:\n{run.text()[-3000:]}"
        assert "Traceback (most recent call last)" not in run.text(), run.text()[-3000:]
    finally:
        if run is not None:
            run.stop()
        sandbox.close()


def test_examples_files_are_shown_in_the_docs():
    """Each docs/examples/ file is printed verbatim in a doc, so the page and the file never drift apart."""
    shown = {b.text.strip() for b in EXAMPLES}
    for example in sorted((DOCS / "examples").glob("*.py")):
        assert example.read_text().strip() in shown, f"{example.name} differs from the block in the docs"


# --- docs stand alone ---------------------------------------------------------------------------------
def test_docs_stand_alone_links_resolve_and_no_spec_folder():
    """A clone has no shared spec folder: docs never point into one, and every relative link resolves."""
    for path in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]:
        text = path.read_text()
        assert not re.search(r"shared/spec|\.\./shared", text), f"{path.name} points into a spec folder"
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"^[a-z]+:", target):
                continue
            assert (path.parent / target).exists(), f"{path.name}: broken link {target}"


FEATURE_ID = re.compile(r"\b([ABCDIKLNPQRSTVWX])(\d{1,2})\b")


def test_every_feature_id_cited_is_explained():
    """Every feature id a doc cites (A4, T2 …, including both ends of ranges like I1–I11) is in docs/features.md."""
    glossary = set(re.findall(r"^\| ([A-Z]\d{1,2}) \|", (DOCS / "features.md").read_text(), re.M))
    cited = {}
    for path in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]:
        if path.name in ("features.md",):
            continue
        for line in path.read_text().splitlines():
            for letter, number in FEATURE_ID.findall(line):
                cited.setdefault(f"{letter}{number}", path.name)
    missing = {i: doc for i, doc in cited.items() if i not in glossary}
    assert not missing, f"cited but not explained in docs/features.md: {missing}"


def test_markdown_tables_do_not_break():
    """A table row never follows a blank line without a new header (the row would render as text)."""
    for path in sorted(DOCS.glob("*.md")):
        lines = path.read_text().splitlines()
        fenced = False
        for n, line in enumerate(lines):
            if line.startswith("```"):
                fenced = not fenced
            if fenced or not line.startswith("|") or (n and lines[n - 1].startswith("|")):
                continue
            nxt = lines[n + 1] if n + 1 < len(lines) else ""
            assert re.match(r"^\|[\s:|-]+\|$", nxt), f"{path.name}:{n + 1}: a table starts here without a header row"


def test_fixture_kinds_are_described():
    """`python -m collie.fixtures --help` says what every kind it accepts does, and docs/fixtures.md lists every kind."""
    from collie.fixtures.agents import KIND_HELP

    out = subprocess.run([sys.executable, "-m", "collie.fixtures", "--help"], cwd=REPO, capture_output=True, text=True,
                         timeout=60).stdout
    page = (DOCS / "fixtures.md").read_text()
    positional = out.split("positional arguments:", 1)[1]
    accepted = set(re.search(r"\{([a-z0-9,-]+)\}", positional).group(1).split(","))
    assert accepted == set(KIND_HELP), "every kind the command accepts has a KIND_HELP line, and no other"
    for kind, words in KIND_HELP.items():
        assert re.search(rf"^  {kind} +\S", out, re.M), f"--help does not describe {kind}"
        assert " ".join(out.split()).count(" ".join(words.split())) == 1
        assert f"| `{kind}` |" in page, f"docs/fixtures.md does not describe {kind}"

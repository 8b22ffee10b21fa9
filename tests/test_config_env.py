"""The `.env` single-agent form (A13) and COLLIE_PROGRAMS=off (A14)."""

from __future__ import annotations

import pytest

from crew.config import load_bridge_config, parse_dotenv, single_agent
from crew.paths import Paths

TOKEN = "0123456789abcdef" * 4


def test_dotenv_syntax():
    env = parse_dotenv('# c\nexport COLLIE_MUX=durable\nA="q v"\nB=\'x\'\nC=v # note\nbad line\n=x\n')
    assert env == {"COLLIE_MUX": "durable", "A": "q v", "B": "x", "C": "v"}


@pytest.mark.parametrize(("env", "problem"), [
    ({"COLLIE_DURABLE_SOCKET": "/s", "COLLIE_DURABLE_URL": "https://x", "COLLIE_DURABLE_TOKEN": TOKEN}, "both"),
    ({"COLLIE_DURABLE_URL": "https://x"}, "without COLLIE_DURABLE_TOKEN"),
    ({"COLLIE_DURABLE_TOKEN": TOKEN}, "without COLLIE_DURABLE_URL"),
    ({}, "needs COLLIE_DURABLE_SOCKET or COLLIE_DURABLE_URL"),
    ({"COLLIE_DURABLE_SOCKET": "/s"}, None),
    ({"COLLIE_DURABLE_URL": "https://x", "COLLIE_DURABLE_TOKEN": TOKEN}, None),
])
def test_single_agent_form(env, problem):
    """A13: errors do not stop the bridge; `default` shows Unreachable with reason `config`."""
    agent = single_agent({"COLLIE_MUX": "durable", **env})
    assert agent.name == "default"
    if problem:
        assert agent.problem.code == "config" and problem in agent.problem.text
    else:
        assert agent.problem is None


def test_no_mux_no_default():
    assert single_agent({"COLLIE_DURABLE_SOCKET": "/s"}) is None


def test_programs_off_ignores_sources_but_keeps_the_env_agent(tmp_path):
    """A14: sources.json is ignored (even a corrupt one), the A13 form still runs."""
    paths = Paths(tmp_path / "c", tmp_path / "s")
    paths.config_dir.mkdir()
    paths.sources.write_text("{corrupt")
    paths.dotenv.write_text("COLLIE_PROGRAMS=off\nCOLLIE_MUX=durable\nCOLLIE_DURABLE_SOCKET=/run/x.sock\n")
    cfg = load_bridge_config(paths, environ={})
    assert cfg.programs_off and [a.name for a in cfg.agents] == ["default"]


def test_process_environment_overrides_dotenv(tmp_path):
    paths = Paths(tmp_path / "c", tmp_path / "s")
    paths.config_dir.mkdir()
    paths.dotenv.write_text("COLLIE_PROGRAMS=off\n")
    assert not load_bridge_config(paths, environ={"COLLIE_PROGRAMS": "on"}).programs_off

"""The `.env` single-agent form (A13) and COLLIE_PROGRAMS=off (A14)."""

from __future__ import annotations

import pytest

from collie.crew.config import load_bridge_config, parse_dotenv, single_agent
from collie.crew.paths import Paths

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


def test_a_config_folder_others_can_write_is_refused(tmp_path):
    """9.11: a 0777 config folder (anyone could swap .env or crew.json) stops the start with the fix."""
    import os

    from collie.crew.errors import ConfigError

    paths = Paths(tmp_path / "c", tmp_path / "s")
    paths.config_dir.mkdir()
    paths.dotenv.write_text(f"COLLIE_MUX=durable\nCOLLIE_DURABLE_URL=https://x\nCOLLIE_DURABLE_TOKEN={TOKEN}\n")
    os.chmod(paths.config_dir, 0o777)
    with pytest.raises(ConfigError) as err:
        load_bridge_config(paths, environ={})
    assert f"chmod 700 {paths.config_dir}" in str(err.value) and "0777" in str(err.value)
    os.chmod(paths.config_dir, 0o755)
    assert load_bridge_config(paths, environ={}).agents[0].url == "https://x"


def test_a_symlinked_env_file_is_refused(tmp_path):
    """9.11: .env is guarded like sources.json: a symlink is not followed."""
    from collie.crew.errors import ConfigError

    paths = Paths(tmp_path / "c", tmp_path / "s")
    paths.config_dir.mkdir()
    (tmp_path / "elsewhere").write_text("COLLIE_PROGRAMS=off\n")
    paths.dotenv.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match="symlink"):
        load_bridge_config(paths, environ={})


def test_an_env_token_with_a_line_break_is_refused_unechoed():
    """9.11, A13: a token that could split a header line makes `default` Unreachable (config), unquoted."""
    bad = TOKEN + "\r\nX-Evil: 1"
    agent = single_agent({"COLLIE_MUX": "durable", "COLLIE_DURABLE_URL": "https://x", "COLLIE_DURABLE_TOKEN": bad})
    assert agent.problem.code == "config" and "control characters" in agent.problem.text
    assert TOKEN not in agent.problem.text and agent.token is None


def test_crew_json_token_is_checked_on_load_and_never_echoed(tmp_path):
    """9.11, 10.6: crew.json's token must be a clean T5 token; every mistake is named, with did-you-mean."""
    import json
    import os

    from collie.crew.crewconfig import read_crew
    from collie.crew.errors import ConfigError

    path = tmp_path / "crew.json"
    path.write_text(json.dumps({"version": 1, "lead": "ws://127.0.0.1:9/crew/v1", "token": TOKEN + "\r\n",
                                "label": "lap", "lable": "x"}))
    os.chmod(path, 0o600)
    with pytest.raises(ConfigError) as err:
        read_crew(path)
    msg = str(err.value)
    assert 'field "lable": unknown field; did you mean "label"?' in msg
    assert 'field "token": the token in crew.json contains spaces or control characters' in msg
    assert TOKEN not in msg and "\n" not in msg

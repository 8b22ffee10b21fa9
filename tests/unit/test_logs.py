"""The bridge log (issues 9.5, 9.11): a peer's value cannot forge a line, and no secret is written.

Invariants: every record is exactly one line that starts with its timestamp (a traceback's lines are
indented); control characters a peer sent are shown as escapes; every registered secret is replaced
by `[redacted]` however short it is and in whatever escaped form an error quotes it.
"""

from __future__ import annotations

import logging
import re

import pytest

from collie.crew import logs

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4} ")


@pytest.fixture
def log_file(tmp_path):
    path = tmp_path / "bridge.log"
    logs.setup(path, stderr=False)
    yield path
    logs.setup(None, stderr=False)


def records(path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def test_a_newline_cannot_forge_a_fatal_line(log_file):
    """9.5: an agent's hello runtime with a newline stays on its record's line, the escape visible."""
    log = logs.get("durable")
    log.info("[durable] %s: hello (runtime %s)", "desk", "sdk\n[bridge] FATAL: sources.json is broken\x1b[2J\r")
    lines = records(log_file)
    assert len(lines) == 1 and STAMP.match(lines[0])
    assert lines[0].endswith("(runtime sdk\\n[bridge] FATAL: sources.json is broken\\x1b[2J\\r)")
    assert "\x1b" not in log_file.read_text()


def test_a_traceback_keeps_its_shape_but_cannot_start_a_record(log_file):
    """9.5: an exception text from a peer spans lines only indented, never as a record of its own."""
    try:
        raise ValueError("bad frame type 'x\n[bridge] FATAL: forged\x1b]0;t\x07'")
    except ValueError:
        logs.get("hub").exception("[bridge] member laptop: a frame failed")
    lines = records(log_file)
    assert STAMP.match(lines[0]) and "a frame failed" in lines[0]
    assert all(line.startswith("    ") for line in lines[1:]) and len(lines) > 2
    assert "\x1b" not in log_file.read_text() and "\x07" not in log_file.read_text()


def test_the_cli_shows_an_old_raw_log_escaped(cli, paths):
    """9.5: `collie logs` escapes a log written before the fix; a lone CR is not a line break."""
    paths.state_dir.mkdir(parents=True)
    paths.log.write_text("2026-01-01T00:00:00+0000 [durable] desk: runtime x\r[bridge] FATAL: forged\x1b[31m\n")
    status, out, _ = cli("logs")
    assert status == 0 and out == "2026-01-01T00:00:00+0000 [durable] desk: runtime x\\r[bridge] FATAL: forged\\x1b[31m\n"


@pytest.mark.parametrize("secret", ["abc", "s3cr3t!", "0123456789abcdef" * 4, "tok\r\nen-with-crlf"])
def test_every_secret_is_redacted_whatever_its_length_and_form(log_file, secret):
    """9.11: a short token is redacted too, and so is the repr an error message quotes it in."""
    logs.redactor.add(secret)
    log = logs.get("link")
    log.warning("[bridge] header %s rejected: %r", secret, ValueError(f"Illegal header value {secret!r}"))
    text = log_file.read_text()
    assert secret not in text and repr(secret)[1:-1] not in text and text.count("[redacted]") == 2


def test_printable_shows_invisible_characters():
    """9.5: bidi overrides, line separators and DEL become escapes; ordinary text is unchanged."""
    assert logs.printable("plain text, ünïcode ✓") == "plain text, ünïcode ✓"
    assert logs.printable("a\u202eb\u2028c\x7fd\x9b") == "a\\u202eb\\u2028c\\x7fd\\x9b"


@pytest.fixture(autouse=True)
def _no_leak():
    """Secrets registered here stay here."""
    before = set(logs.redactor._secrets)
    yield
    logs.redactor._secrets = before
    logging.getLogger("collie").handlers.clear()

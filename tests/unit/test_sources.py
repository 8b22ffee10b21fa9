"""sources.json validation (features A1, A4–A7): every broken file gets one line naming entry and field."""

from __future__ import annotations

import json
import os
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collie.crew.errors import ConfigError
from collie.crew.sources import Source, parse_sources, read_sources, remove, render, tighten_mode, upsert, write_sources

TOKEN = "t" * 40

BAD = [
    ("{", "sources.json is not valid JSON at line 1 column 2"),
    ('{"name": "a"}', "sources.json must be a JSON array of entries"),
    ("[1]", "sources.json entry 1: expected an object"),
    ('[{"name": "a", "kind": "durable", "socket": "/s", "colour": 1}]',
     'sources.json entry 1 ("a"): field "colour": unknown field'),
    ('[{"name": "a", "kind": "terminal", "socket": "/s"}]', 'sources.json entry 1 ("a"): field "kind": must be "durable"'),
    ('[{"name": "a", "socket": "/s"}]', 'sources.json entry 1 ("a"): field "kind": missing'),
    ('[{"name": "Desk", "kind": "durable", "socket": "/s"}]', 'sources.json entry 1: field "name": \'Desk\' breaks the name rule'),
    ('[{"name": "-a", "kind": "durable", "socket": "/s"}]', 'field "name": \'-a\' breaks the name rule'),
    ('[{"name": "' + "a" * 33 + '", "kind": "durable", "socket": "/s"}]', 'breaks the name rule'),
    ('[{"name": 5, "kind": "durable", "socket": "/s"}]', 'sources.json entry 1: field "name": expected a string, got int 5'),
    ('[{"name": "a", "kind": "durable", "socket": "/s"}, {"name": "a", "kind": "durable", "socket": "/t"}]',
     'sources.json entry 2 ("a"): field "name": the name is already used by entry 1'),
    ('[{"name": "a", "kind": "durable", "socket": "/s", "url": "https://x", "token": "' + TOKEN + '"}]',
     'sources.json entry 1 ("a"): field "socket": both "socket" and "url" are set'),
    ('[{"name": "a", "kind": "durable"}]', 'sources.json entry 1 ("a"): field "socket": neither "socket" nor "url"'),
    ('[{"name": "desk", "kind": "durable", "socket": "/s"}, {"name": "edge", "kind": "durable", "url": "https://e"}]',
     'sources.json entry 2 ("edge"): field "url": missing "token"'),
    ('[{"name": "default", "kind": "durable", "socket": "/s"}]',
     'sources.json entry 1 ("default"): field "name": "default" is the main session\'s name'),
    ('[{"name": "a", "kind": "durable", "socket": "/s", "token": "' + TOKEN + '"}]', 'field "token": a socket entry takes no "token"'),
    ('[{"name": "a", "kind": true, "socket": "/s"}]', 'field "kind": expected a string, got bool True'),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_each_broken_file_gets_one_line_naming_entry_and_field(text, message):
    """A4: the first problem stops with one line that names the entry and the field."""
    with pytest.raises(ConfigError) as err:
        parse_sources(text)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_wrongly_typed_token_is_never_echoed():
    """T5: even a malformed token value never appears in the error text."""
    with pytest.raises(ConfigError) as err:
        parse_sources('[{"name": "a", "kind": "durable", "url": "https://x", "token": 12345678901234567890}]')
    assert "12345678901234567890" not in str(err.value)
    assert 'field "token": must be a string' in str(err.value)


def test_both_entry_forms_parse():
    """A1: the socket form and the url+token form."""
    got = parse_sources(json.dumps([
        {"name": "desk", "kind": "durable", "socket": "/run/user/1000/desk/app.sock"},
        {"name": "edge", "kind": "durable", "url": "https://edge.example.com", "token": TOKEN},
    ]))
    assert [(s.name, s.transport, s.address) for s in got] == [
        ("desk", "socket", "/run/user/1000/desk/app.sock"), ("edge", "url", "https://edge.example.com")]
    assert TOKEN not in repr(got)


def test_write_is_0600_and_round_trips(tmp_path):
    """A5, A6: attach writes the file 0600, atomically, and reads back the same entries."""
    path = tmp_path / "cfg" / "sources.json"
    entries = [Source("desk", "durable", socket="/s"), Source("edge", "durable", url="https://e", token=TOKEN)]
    write_sources(path, entries)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert read_sources(path) == entries
    assert [p.name for p in path.parent.iterdir()] == ["sources.json"]  # no temp file left behind


def test_upsert_and_remove_refuse_a_corrupt_file(tmp_path):
    """A5: attach and detach never overwrite a file they cannot parse."""
    path = tmp_path / "sources.json"
    path.write_text('[{"name": "desk", "kind": "durable", "socket": "/s"},')
    for action in (lambda: upsert(path, Source("x", "durable", socket="/x")), lambda: remove(path, "desk")):
        with pytest.raises(ConfigError):
            action()
        assert path.read_text() == '[{"name": "desk", "kind": "durable", "socket": "/s"},'


def test_upsert_replaces_by_name_and_keeps_the_others(tmp_path):
    """A12: re-attaching a name replaces that entry (token rotation) and keeps every other entry."""
    path = tmp_path / "sources.json"
    upsert(path, Source("desk", "durable", socket="/s"))
    upsert(path, Source("edge", "durable", url="https://e", token=TOKEN))
    assert upsert(path, Source("edge", "durable", url="https://e", token="n" * 40)) is True
    assert [(s.name, s.token) for s in read_sources(path)] == [("desk", None), ("edge", "n" * 40)]


def test_symlinked_file_and_other_owner_are_refused(tmp_path):
    """A symlinked sources.json, or one owned by someone else, is refused (it could be swapped)."""
    real = tmp_path / "real.json"
    real.write_text("[]")
    link = tmp_path / "sources.json"
    link.symlink_to(real)
    with pytest.raises(ConfigError, match="is a symlink"):
        read_sources(link)
    link.unlink()
    real.rename(link)
    os.chown(link, 4242, 4242)
    with pytest.raises(ConfigError, match="owned by uid 4242"):
        read_sources(link)


def test_looser_mode_is_tightened(tmp_path):
    """A6: a 0644 file is made 0600 and the old mode reported for the log."""
    path = tmp_path / "sources.json"
    path.write_text("[]")
    os.chmod(path, 0o644)
    assert tighten_mode(path) == "0644"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert tighten_mode(path) is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=20,
)
entry_like = st.fixed_dictionaries(
    {}, optional={k: json_values | st.text(max_size=40) for k in ("name", "kind", "socket", "url", "token", "extra")})


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200), json_values.map(json.dumps), st.lists(entry_like, max_size=4).map(json.dumps)))
def test_fuzz_parser_only_ever_raises_config_error(data):
    """Whatever the file holds, the parser returns entries or raises one ConfigError line — never a traceback."""
    try:
        got = parse_sources(data)
    except ConfigError as exc:
        assert str(exc).startswith("sources.json") and "\n" not in str(exc)
    else:
        assert parse_sources(render(got)) == got


names = st.from_regex(r"\A[a-z0-9][a-z0-9-]{0,31}\Z").filter(lambda n: n != "default")


@given(st.lists(st.tuples(names, st.booleans(), st.text(min_size=1, max_size=60)), max_size=6, unique_by=lambda t: t[0]))
def test_round_trip_of_valid_files(items):
    """render → parse gives back exactly the entries written."""
    sources = [Source(n, "durable", socket="/" + a) if sock else Source(n, "durable", url="https://" + a, token=TOKEN)
               for n, sock, a in items]
    assert parse_sources(render(sources)) == sources


def test_a_trailing_comma_is_reported_at_the_comma():
    """10.6, A4: json reports the `]` after a trailing comma; the error names the comma's line."""
    text = '[\n  {"name": "a", "kind": "durable", "socket": "/s"},\n  {"name": "b", "kind": "durable", "socket": "/t"},\n]\n'
    with pytest.raises(ConfigError) as err:
        parse_sources(text)
    assert str(err.value) == "sources.json is not valid JSON at line 3 column 51: a trailing comma (remove it)"


def test_every_mistake_is_reported_with_entry_and_field():
    """10.6, A4: three mistakes in two entries: all three named in the one line, each with entry and field."""
    text = json.dumps([{"name": "a", "kind": "durable", "sokcet": "/s"},
                       {"name": "b", "kind": "terminal", "url": "https://x"}])
    with pytest.raises(ConfigError) as err:
        parse_sources(text)
    msg = str(err.value)
    assert msg.startswith("sources.json has 4 mistakes: (1) entry 1 (\"a\"): field \"sokcet\": unknown field")
    assert '(2) entry 1 ("a"): field "socket": neither' in msg
    assert '(3) entry 2 ("b"): field "kind": must be "durable"' in msg
    assert '(4) entry 2 ("b"): field "url": missing "token"' in msg and "\n" not in msg


@pytest.mark.parametrize(("field", "hint"), [("sokcet", "socket"), ("tokn", "token"), ("Name", "name"), ("colour", None)])
def test_an_unknown_field_close_to_a_known_one_gets_did_you_mean(field, hint):
    """10.6: a typo gets `did you mean`; an unrelated field does not."""
    with pytest.raises(ConfigError) as err:
        parse_sources(json.dumps([{"name": "a", "kind": "durable", "socket": "/s", field: 1}]))
    assert (f'did you mean "{hint}"?' in str(err.value)) if hint else ("did you mean" not in str(err.value))


@pytest.mark.parametrize("token", ["a" * 40 + "\r\nX-Evil: 1", "a" * 40 + "\x1b", "a" * 20 + " " + "a" * 20])
def test_a_token_with_line_breaks_or_control_characters_is_refused_unechoed(token):
    """9.11, T5: a hand-written token that could split a header line is refused at load, never echoed."""
    with pytest.raises(ConfigError) as err:
        parse_sources(json.dumps([{"name": "edge", "kind": "durable", "url": "https://e", "token": token}]))
    assert 'entry 1 ("edge"): field "token": contains spaces, line breaks or control characters' in str(err.value)
    assert "a" * 20 not in str(err.value)


def test_a_deeply_nested_file_is_a_config_error():
    """9.10 (the sources.json part): nesting past the parser's depth is one config error, not a traceback."""
    with pytest.raises(ConfigError, match="nested too deeply"):
        parse_sources("[" * 100_000 + "]" * 100_000)

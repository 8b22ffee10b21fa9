"""Issue 39's plain rules, without a server: which Accept-Encoding values get gzip, which If-None-Match
values revalidate, the live channel's gzip stream decoded write by write, and the newest-page reads."""

from __future__ import annotations

import zlib

import pytest

from collie.bridge.reader import AgentReader, ItemLog, newest_of
from collie.lead.door.packing import StreamPacker, accepts_gzip, etag, matches


@pytest.mark.parametrize("header, gz", [
    ("gzip", True), ("gzip, deflate, br, zstd", True), ("GZIP;q=0.5", True), ("x-gzip", True), ("*", True),
    (None, False), ("", False), ("identity", False), ("br", False), ("gzip;q=0", False), ("gzip;q=0.0, *", False),
    ("*;q=0", False), ("br, *;q=0.1", True), ("gzip;q=x", False),
])
def test_gzip_only_for_a_client_that_accepts_it(header, gz):
    """Accept-Encoding (RFC 9110 §12.5.3): gzip named or `*`, with a q above zero; a named gzip wins over `*`."""
    assert accepts_gzip(header) is gz


def test_if_none_match_revalidates_the_representation_it_names():
    """A strong tag names one representation (gzip or not); If-None-Match compares weakly, `*` matches any."""
    body = b'{"sections":[]}'
    plain, packed = etag(body, False), etag(body, True)
    assert plain != packed and packed == plain[:-1] + '-gz"'
    assert matches(plain, plain) and matches(f'"x", W/{plain}', plain) and matches("*", plain)
    assert not matches(packed, plain) and not matches(None, plain) and not matches('"other"', plain)


def test_the_live_channels_gzip_stream_decodes_whole_after_every_write():
    """Each write of the channel is flushed: a phone decodes every event as soon as its bytes arrive, and
    later events (the same keys again) cost a fraction of the first."""
    packer, z = StreamPacker(), zlib.decompressobj(16 + zlib.MAX_WBITS)
    events = [b'event: row\ndata: {"machine":"m1","agent":"a%d","row":{"status":"ready","open":3}}\n\n' % n for n in range(20)]
    sizes = []
    for ev in events:
        out = packer.pack(ev)
        sizes.append(len(out))
        assert z.decompress(out) == ev
    assert z.decompress(packer.pack(b": ping\n\n")) == b": ping\n\n"
    assert max(sizes[5:]) < len(events[0]) / 2


def reader_with(n: int, gaps=()) -> AgentReader:
    reader = AgentReader.__new__(AgentReader)
    log = ItemLog()
    for seq in range(1, n + 1):
        log.put(seq, {"seq": seq, "rev": seq, "kind": "reply", "text": f"m{seq}"})
    log.since = n
    log.gaps = set(gaps)
    reader.logs = {"c": log}
    return reader


def test_the_newest_page_then_the_pages_above_it_hold_every_item_once():
    """C1, issue 39: `items_newest` gives the newest N by position, oldest first, `earlier` the `before` of
    the page above (None at the top); the pages join with nothing missing or twice; a gap marker comes
    before the item where older ones were left out; `next_since` is the highest revision held."""
    reader = reader_with(450, gaps={1})
    page = reader.items_newest("c", 200)
    assert [i["seq"] for i in page["items"]] == list(range(251, 451)) and page["earlier"] == 251
    assert page["next_since"] == 450 and page["more"] is False
    seen = [i["seq"] for i in page["items"]]
    while page["earlier"] is not None:
        page = reader.items_newest("c", 200, page["earlier"])
        seen = [i["seq"] for i in page["items"] if i["kind"] != "gap"] + seen
    assert seen == list(range(1, 451)) and page["items"][0] == {"kind": "gap", "seq": 1, "text": page["items"][0]["text"]}
    assert reader.items_newest("nothing", 200) == {"items": [], "next_since": 0, "more": False, "earlier": None}


def test_the_newest_page_of_a_closed_conversation_pages_the_same_way():
    """A closed conversation's items, read through from its agent, page by position as an open one's."""
    items = [{"seq": s, "rev": s + 1000, "kind": "reply"} for s in range(1, 11)]
    page = newest_of(items, 4)
    assert [i["seq"] for i in page["items"]] == [7, 8, 9, 10] and page["earlier"] == 7 and page["next_since"] == 1010
    top = newest_of(items, 4, 3)
    assert [i["seq"] for i in top["items"]] == [1, 2] and top["earlier"] is None
    assert newest_of([], 4) == {"items": [], "next_since": 0, "more": False, "earlier": None}

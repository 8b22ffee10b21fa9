"""What a phone pays per answer (issue 39): JSON answers gzipped when the client accepts it, reads
revalidated by strong ETags, and the live channel's stream gzipped as it goes.

Guarantees:
- A JSON answer of at least `MIN_PACK` bytes is sent `Content-Encoding: gzip` only when the request's
  `Accept-Encoding` names gzip (or `*`) with a non-zero q; never otherwise. Every JSON answer says
  `Vary: Accept-Encoding`. The gzip body decodes to the very bytes the identity answer would carry.
- A successful `GET /api/...` JSON answer carries a strong `ETag`: the SHA-256 of its JSON bytes (an
  identity answer) with `-gz` after it for the gzip representation (RFC 9110 §8.8.3: a strong validator
  names one representation). A request whose `If-None-Match` names the tag of the representation it
  would get is answered `304` with no body; nothing is compressed for it. Such answers say
  `Cache-Control: private, no-cache`: a browser keeps them and asks again every time.
- The live channel (`packed_stream`) is one gzip stream flushed after every write (`Z_SYNC_FLUSH`): each
  event arrives whole, at once, and later events are compressed against the earlier ones.

Refuses: nothing; an answer that is not JSON, streamed, already encoded, or not a success is left alone
(bar `Vary`). Brotli is not offered: gzip already brings the 100-member dashboard to a few KB
(bench/README.md, issue 39), and brotli would add a compiled dependency for the last kilobyte.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib

import trio

MIN_PACK = 512  # below this, gzip's 20-byte frame and a CPU pass cost more than they save
LEVEL = 6
THREAD_OVER = 64 * 1024  # a body this big is compressed in a worker thread (zlib lets go of the GIL)
STREAM_WBITS = 16 + 13  # the live channel: gzip framing, an 8 KiB window (64 KiB of zlib state a channel)
STREAM_MEMLEVEL = 6


def accepts_gzip(header: str | None) -> bool:
    """Whether an `Accept-Encoding` value accepts gzip: named (or `*`) without `q=0`."""
    star = named = None
    for part in (header or "").lower().split(","):
        coding, *params = [p.strip() for p in part.split(";")]
        q = 1.0
        for p in params:
            if p.startswith("q="):
                try:
                    q = float(p[2:])
                except ValueError:
                    q = 0.0
        if coding in ("gzip", "x-gzip"):
            named = q > 0 if named is None else named or q > 0
        elif coding == "*":
            star = q > 0
    return named if named is not None else bool(star)


def body_tag(body: bytes) -> str:
    """The tag of a JSON body (no quotes, no coding): what the page hands back as `have=` on the live channel."""
    return hashlib.sha256(body).hexdigest()[:24]


def etag(body: bytes, gz: bool) -> str:
    return f'"{body_tag(body)}{"-gz" if gz else ""}"'


def matches(if_none_match: str | None, tag: str) -> bool:
    """If-None-Match's weak comparison (RFC 9110 §13.1.2): `*`, or any listed tag equal to `tag` bar `W/`."""
    if not if_none_match:
        return False
    wanted = [t.strip() for t in if_none_match.split(",")]
    return "*" in wanted or tag in (t.removeprefix("W/") for t in wanted)


def compress(body: bytes) -> bytes:
    return gzip.compress(body, LEVEL, mtime=0)


async def pack_answer(resp, request) -> object:
    """The after-request step for the API: revalidate, then compress, a JSON answer (see the top)."""
    from quart.wrappers.response import DataBody

    if resp.mimetype != "application/json" or not isinstance(resp.response, DataBody) or "Content-Encoding" in resp.headers:
        return resp
    vary = resp.headers.get("Vary")
    if not vary or "accept-encoding" not in vary.lower():
        resp.headers["Vary"] = f"{vary}, Accept-Encoding" if vary else "Accept-Encoding"
    body = await resp.get_data()
    gz = len(body) >= MIN_PACK and accepts_gzip(request.headers.get("Accept-Encoding"))
    if request.method == "GET" and resp.status_code == 200 and request.path.startswith("/api/"):
        tag = etag(body, gz)
        resp.headers["ETag"] = tag
        resp.headers["Cache-Control"] = "private, no-cache"
        if matches(request.headers.get("If-None-Match"), tag):
            resp.set_data(b"")
            resp.status_code = 304
            resp.headers.pop("Content-Length", None)
            return resp
    if gz:
        packed = await trio.to_thread.run_sync(compress, body) if len(body) > THREAD_OVER else compress(body)
        resp.set_data(packed)
        resp.headers["Content-Encoding"] = "gzip"
    return resp


def install_packing(app) -> None:
    """Every answer of `app` that is JSON goes through `pack_answer`."""
    from quart import request

    @app.after_request
    async def packed(resp):
        return await pack_answer(resp, request)


class StreamPacker:
    """One live channel's gzip stream: each `pack(chunk)` gives the bytes to write, flushed so that the
    phone can decode everything written so far."""

    def __init__(self) -> None:
        self._z = zlib.compressobj(LEVEL, zlib.DEFLATED, STREAM_WBITS, STREAM_MEMLEVEL)

    def pack(self, chunk: bytes) -> bytes:
        return self._z.compress(chunk) + self._z.flush(zlib.Z_SYNC_FLUSH)


async def packed_stream(chunks):
    """`chunks` (an async iterator of bytes) as one gzip stream, a flush after each."""
    packer = StreamPacker()
    try:
        async for chunk in chunks:
            yield packer.pack(chunk)
    finally:
        await chunks.aclose()

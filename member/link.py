"""The member's link up to its lead (crew.md §2): dial out, keep the lead's view current, carry writes.

The protocol itself — the hello/welcome handshake, reading every lead frame strictly, the answer each
request and read gets (at once when it cannot be read), the beats — is decided by `collie.crew.membercore.MemberCore`,
shared with the testing kit's fake member; this module dials, trusts, reads and writes the WebSocket, and
carries the core's events out on this machine's bridge.

- Dial `wss://…/crew/v1` (or `ws://` to loopback) with the member token in the upgrade's
  `Authorization` header; `hello` → `welcome`. A refused token (closed `unauthorized`), `version`,
  `label_in_use` (another machine holds this label: see the lead's rule in collie.lead.members.hub), or no lead
  listening are reported and retried.
- After every (re)connect: a full `snapshot` (agents that do not fit one frame follow as `agent`
  frames, named in its `more`); then an `agent` frame only when an agent's view changed. Coalescing
  is on the leading edge: the first change after a quiet spell goes at once, later ones at most one
  frame per `MIN_GAP` per agent (`VIEWED_GAP` while a phone views it), and the last state always
  goes — a lone ask is never delayed, nor a turn, state or ask change.
- No frame is larger than crewwire.MAX_FRAME (the lead closes the link above it): a view keeps at
  most MAX_CONVERSATIONS open conversations — those that matter (waiting, working, then the newest,
  collie.crew.views.keep_conversations) — and says how many it left out (`left_out`); an items read too
  large keeps its newest items behind the left-out line (S3).
- `beat` every 10 s (and a WebSocket ping), so the lead sees silence within 30 s.
- `request` frames run through this bridge's own writer and journal: a request id the member has
  seen is never sent to the agent again, so a lead that resends after a dropped link gets the
  stored receipt. The lead holds the session lock, so the writer does not take it again.
- Reconnect (`Redial`): exponential backoff 0.5 s → 30 s with jitter, back to 0.5 s after a link that
  lasted HEALTHY_AFTER. A lead that closes the link going away (code 1001: it is shutting down or
  restarting, `collie restart`) is tried again at once and then every RESTART_RETRY (jittered) for
  RESTART_WINDOW, so the member is back within a few seconds of the restarted lead answering (issue 36.4).
- Trust (crew.md §2): a `wss://` lead is verified against the system's authorities and, when crew.json
  carries the invite's `ca_sha256`, the lead's own authority: read from the lead's `/trust/ca.crt` and kept
  only if its SHA-256 is that one (then the pin, not the unverified read, is what vouches for it). A lead
  that presents another authority is refused naming both fingerprints; every TLS failure is said in plain
  words (`tls_failure`): not trusted, wrong name, expired, or the mismatch.
"""

from __future__ import annotations

import json
import math
import random
import secrets
import ssl
import time
from urllib.parse import urlsplit

import attrs
import trio
from trio_websocket import ConnectionClosed, ConnectionRejected, HandshakeError, open_websocket_url

from collie.bridge.bridge import Bridge
from collie.bridge.pace import VIEWED_GAP
from collie.bridge.panes import chat_items
from collie.bridge.reader import LEFT_OUT, newest_of
from collie.bridge.writer import Writer
from collie.bridge.writes import WriteRequest
from collie.crew import crewwire, logs
from collie.crew.crewconfig import CrewConfig
from collie.crew.membercore import (PONG_WAIT, ROOM, Answer, Ignored, LineBudget, Lookup, MemberCore, Misfit, Watch, Write,
                             agent_frame, snapshot_frames)
from collie.crew.security import check_loopback_peer
from collie.crew.views import keep_conversations
from collie.crew.wire import unstructure

log = logs.get("crew")

MIN_GAP = crewwire.MIN_GAP
BACKOFF_MIN, BACKOFF_MAX = 0.5, 30.0
HEALTHY_AFTER = 10.0  # a link up this long resets the backoff (a lead that closes every link at once does not)
GOING_AWAY = 1001  # the close code of a lead shutting down or restarting (collie.lead.members.hub)
RESTART_RETRY = 1.0  # after a lead went away, a try this often (jittered ×0.5–1.5) ...
RESTART_WINDOW = 120.0  # ... for this long; then the backoff grows again
CONNECT_TIMEOUT = 10.0
FOLLOW_TURN_MAX = 60.0  # how long the member reads eagerly for a turn a lead's write started to end


class LeadRefused(Exception):
    """The lead's address is held by a process this member will not talk to (the message says why)."""


AUTHORITY_PATH = "/trust/ca.crt"
AUTHORITY_MAX = 16384  # an authority's certificate is under 1 KiB


async def read_authority(url: str, pin: str) -> bytes:
    """The lead's own authority (DER) from its `/trust/ca.crt`, read without verification and kept only when its
    SHA-256 is `pin`. Raises LeadRefused naming both fingerprints when it is another, or none is served."""
    from collie.crew.security import fingerprint_der

    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 443
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # the pin below is what vouches
    hostport = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    with trio.fail_after(CONNECT_TIMEOUT):
        stream = await trio.open_ssl_over_tcp_stream(host, port, ssl_context=ctx, https_compatible=True)
        try:
            await stream.do_handshake()
            chain = stream.getpeercert(binary_form=True)
            await stream.send_all(f"GET {AUTHORITY_PATH} HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\n"
                                  "Accept: application/x-x509-ca-cert\r\n\r\n".encode())
            raw = b""
            while len(raw) <= AUTHORITY_MAX + 4096:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                raw += chunk
        finally:
            await trio.aclose_forcefully(stream)
    head, _, body = raw.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    got = fingerprint_der(body) if status[1:2] == [b"200"] and 0 < len(body) <= AUTHORITY_MAX else None
    if got == pin:
        return body
    if status[1:2] == [b"421"]:
        raise LeadRefused(f"the lead at {url} does not answer to that name (wrong_host): dial it by an address "
                          "`collie doctor` on the lead lists, or add the name there with `collie serve --name`")
    served = got or (fingerprint_der(chain) + " (its certificate; it serves no authority of its own)" if chain else "none")
    raise LeadRefused(f"the lead at {url} presents a certificate authority with SHA-256 {served}, but its invite "
                      f"named {pin}: this is not the lead you were invited to, or its authority was made anew "
                      "(then ask the lead for a new invite: `collie crew invite`)")


TLS_WORDS = {  # OpenSSL's verify codes → what a person can act on
    10: "its certificate has expired (check both machines' clocks; a lead issues a new one at its next start)",
    9: "its certificate is not valid yet (check both machines' clocks)",
    62: "its certificate is for another name: dial it by a name or address it serves (`collie doctor` on the lead "
        "lists them), or add the name there with `collie serve --name`",
    64: "its certificate is for another address: dial it by an address it serves (`collie doctor` on the lead lists "
        "them)",
    47: "its certificate names an address or name its authority may not vouch for: dial it by the address the "
        "invite gave",
}
NOT_TRUSTED = ("its certificate is not trusted by this machine: join with the command `collie crew invite` prints "
               "on the lead (it carries --ca-sha256), or give the lead a certificate this machine trusts")


def tls_failure(exc: BaseException | None) -> str | None:
    """A TLS failure anywhere in `exc`'s causes, in plain words; None when it is none."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, ssl.SSLCertVerificationError):
            return TLS_WORDS.get(exc.verify_code, NOT_TRUSTED)
        if isinstance(exc, ssl.SSLError):
            return f"the TLS handshake failed ({exc.reason or exc.__class__.__name__}): is it a Collie lead, over TLS?"
        if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            found = [w for w in map(tls_failure, exc.exceptions) if w]
            if found:
                return found[0]
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


@attrs.define
class LinkStatus:
    lead: str
    connected: bool = False
    since: float | None = None  # wall clock of the last change of `connected`
    last_contact: float | None = None  # wall clock of the last frame from the lead
    last_error: str | None = None
    connects: int = 0
    read_only: bool = False


def agent_view(bridge: Bridge, name: str) -> dict:
    """One agent's view as the lead reads it, with at most MAX_CONVERSATIONS open conversations (those that
    matter) and how many the view leaves out (`left_out`, with those this bridge does not read)."""
    reader = bridge.readers[name]
    state = reader.raw_state if reader.hello is not None else None
    left_out = reader.left_out if state is not None else 0
    if isinstance(state, dict) and isinstance(state.get("conversations"), list) \
            and len(state["conversations"]) > crewwire.MAX_CONVERSATIONS:
        kept, cut = keep_conversations(state["conversations"], crewwire.MAX_CONVERSATIONS)
        state, left_out = {**state, "conversations": kept}, left_out + cut
    view = {"name": name, "status": unstructure(reader.status_view()), "hello": reader.raw_hello, "state": state}
    if left_out:
        view["left_out"] = min(crewwire.LEFT_OUT_MAX, left_out)
    if len(crewwire.encode(view)) > ROOM:
        status = {**view["status"], "status": "unreachable", "reason": "protocol",
                  "detail": "the durable agent's state is larger than the crew link carries "
                            f"({crewwire.MAX_FRAME // 1024} KiB)"}
        view = {"name": name, "status": status, "hello": None, "state": None}
    return view


class Coalescer:
    """Leading-edge rate limit per agent (plain class, `now` passed in): a change after a quiet spell
    goes at once; within `gap` of the last frame it waits for the gap's end; the newest state always
    goes in the end, so nothing is lost and a lone change is never delayed.

    Only a burst is paced, and a burst is a stream of items (a reply being written). A change of a
    conversation's turn or state (a turn starting or ending, an ask opening) or of the agent's status
    goes at once even within the gap: the lead's inbox runs an agent's next item when it sees the
    turn end (crew.md §4), so holding that frame would hold the agent's queue (issue 16.1). Those
    changes come at most a few per turn, and reads are paced by the bridge, so they cannot flood."""

    def __init__(self, gap: float) -> None:
        self.gap = gap
        self.sent: dict[str, str] = {}  # agent -> the view it was last sent as
        self.shape: dict[str, object] = {}  # agent -> its turns, states and status as last sent
        self.last: dict[str, float] = {}  # agent -> when

    def decide(self, name: str, key: str, now: float, shape: object = None, gap: float | None = None) -> float | None:
        """0 to send now, seconds to wait, or None when the lead already has this view. `gap`: this agent's
        own (VIEWED_GAP while a phone views it: the bridge reads it at that pace already, issue 29)."""
        if self.sent.get(name) == key:
            return None
        if shape is not None and self.shape.get(name) != shape:
            return 0.0
        return max(0.0, self.last.get(name, -math.inf) + (self.gap if gap is None else gap) - now)

    def mark(self, name: str, key: str, now: float, shape: object = None) -> None:
        self.sent[name], self.last[name], self.shape[name] = key, now, shape


def view_shape(view: dict) -> tuple:
    """What in a view is never held by the gap: the status and each conversation's turn, state and open
    asks (an ask closed and another raised at once leaves the state `waiting`: issue 29)."""
    state = view.get("state")
    convs = state.get("conversations") if isinstance(state, dict) else None
    turns = tuple((c.get("id"), c.get("turn"), c.get("state"),
                   tuple(a.get("id") for a in c.get("asks") or [] if isinstance(a, dict))
                   if isinstance(c.get("asks"), list) else ())
                  for c in convs if isinstance(c, dict)) if isinstance(convs, list) else ()
    status = view.get("status")
    return (status.get("status") if isinstance(status, dict) else None, turns)


def fit_items(result: dict, frame_room: int = ROOM) -> dict:
    """An items answer that fits one frame: the newest items, behind the left-out line (S3)."""
    items = result["items"]
    if len(crewwire.encode(result)) <= frame_room:
        return result
    lo, hi = 0, len(items)  # the fewest items to drop so that the rest fits
    while lo < hi:
        mid = (lo + hi) // 2
        kept = items[mid:]
        gap = [{"kind": "gap", "seq": kept[0].get("seq", 0) if kept else 0, "text": LEFT_OUT}]
        if len(crewwire.encode({**result, "items": gap + kept})) <= frame_room:
            hi = mid
        else:
            lo = mid + 1
    kept = items[lo:]
    return {**result, "items": [{"kind": "gap", "seq": kept[0].get("seq", 0) if kept else 0, "text": LEFT_OUT}] + kept}


class Redial:
    """How long the member waits before dialling the lead again (plain: times passed in, jitter from `rng`).

    - `failed(now)`: a try that reached no lead. Within a restart window, RESTART_RETRY; else the
      backoff, doubling from BACKOFF_MIN to BACKOFF_MAX.
    - `lost(up_at, now, going_away)`: a link that had been welcomed at `up_at` ended. One that lasted
      HEALTHY_AFTER resets the backoff. A lead going away (close code 1001) after such a link (or the first
      time) opens a restart window and is tried again at once; after a short link it is one more failed
      try, so a lead that welcomes and closes every link is not dialled in a tight loop."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.backoff = BACKOFF_MIN
        self.window_start: float | None = None

    def _jitter(self, base: float) -> float:
        return base * self.rng.uniform(0.5, 1.5)

    def failed(self, now: float) -> float:
        if self.window_start is not None and now < self.window_start + RESTART_WINDOW:
            return self._jitter(RESTART_RETRY)
        delay = self._jitter(self.backoff)
        self.backoff = min(self.backoff * 2, BACKOFF_MAX)
        return delay

    def lost(self, up_at: float, now: float, going_away: bool) -> float:
        healthy = now - up_at >= HEALTHY_AFTER
        if healthy:
            self.backoff = BACKOFF_MIN
        if going_away and (healthy or self.window_start is None):
            self.window_start = now
            return 0.0
        return self.failed(now)


def going_away(exc: BaseException) -> bool:
    """Did the lead close the link going away (shutting down or restarting)? Exception groups are unwrapped."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return isinstance(exc, ConnectionClosed) and getattr(exc.reason, "code", None) == GOING_AWAY


class Link:
    def __init__(self, cfg: CrewConfig, bridge: Bridge, writer: Writer) -> None:
        self.cfg = cfg
        self.bridge = bridge
        self.writer = writer
        self.url = crewwire.ws_url(cfg.lead)
        self.status = LinkStatus(lead=self.url)
        self.boot = secrets.token_hex(8)  # one per process: the lead knows a reconnect of this member by it
        self.rng = random.Random()
        self.authority: bytes | None = None  # the lead's own authority (DER), once its SHA-256 matched the pin
        self.up_at: float | None = None  # trio time the current link was welcomed (None: not up)
        self.bad_lines = LineBudget()  # lines about the lead's bad frames, a minute
        self.core: MemberCore | None = None  # the current link's protocol state

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        redial = Redial(self.rng)
        while True:
            self.up_at = None
            try:
                await self._connect_once()
                exc = None
            except Exception as err:  # whatever broke the link, it is reported and the link comes back
                exc = err
                self._down(self.describe(err))
            now = trio.current_time()
            if self.up_at is None:
                delay = redial.failed(now)
            else:
                delay = redial.lost(self.up_at, now, exc is not None and going_away(exc))
            await trio.sleep(delay)

    def describe(self, exc: BaseException) -> str:
        """One line for what broke the link; exception groups (a nursery's) are unwrapped."""
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        if isinstance(exc, LeadRefused):
            return str(exc)
        if isinstance(exc, ConnectionRejected):
            return (f"the lead refused this member (HTTP {exc.status_code}): "
                    + ("the member token is wrong or was removed; ask for a new invite"
                       if exc.status_code in (401, 403) else "see the lead's log"))
        words = tls_failure(exc)
        if words is not None:
            self.authority = None  # a lead whose authority changed is read (and compared) again
            return f"cannot trust the lead at {self.url}: {words}"
        if isinstance(exc, HandshakeError):
            return f"cannot reach the lead at {self.url} ({exc.__class__.__name__})"
        if isinstance(exc, ConnectionClosed):
            reason = getattr(exc.reason, "reason", None) or "closed"
            if reason == crewwire.UNAUTHORIZED:
                return ("the lead refused this member (unauthorized): the member token is wrong or was removed; "
                        "ask for a new invite")
            if reason == crewwire.LABEL_IN_USE:
                return (f"the lead refused this member (label_in_use): another machine is connected as "
                        f"{self.cfg.label}; give each machine its own invite (`collie crew invite --label …`)")
            return f"the lead closed the link: {crewwire.shown(reason)}"
        if isinstance(exc, trio.TooSlowError):
            return "the lead did not answer in time (this machine may have slept)"
        return f"link lost: {exc.__class__.__name__}: {exc}"

    def _down(self, why: str) -> None:
        if self.status.connected or self.status.last_error != why:
            log.info("[crew] %s", why)
        self.status.connected = False
        self.status.since = time.time()
        self.status.last_error = why

    def _loopback_check(self, remote: tuple | None = None, local: tuple | None = None) -> None:
        """A lead on loopback must be this user's process: its port's listener before the token goes, then
        this very connection's other end before anything the lead says is acted on (T3, issue 25.2)."""
        parts = urlsplit(self.url)
        host = "127.0.0.1" if (parts.hostname or "") == "localhost" else (parts.hostname or "")
        remote = remote or (host, parts.port or (443 if parts.scheme == "wss" else 80))
        problem = check_loopback_peer(remote, local, f"{remote[0]}:{remote[1]}")
        if problem is not None:
            raise LeadRefused(f"the lead at {self.url} is unreachable ({problem.code}): {problem.text}")

    async def _tls_context(self) -> ssl.SSLContext | None:
        """The system's authorities, and the lead's own when the invite pinned it (read once, then kept)."""
        if not self.url.startswith("wss://"):
            return None
        ctx = ssl.create_default_context()
        pin = getattr(self.cfg, "ca_sha256", None)
        if pin:
            if self.authority is None:
                self.authority = await read_authority(self.url, pin)
            ctx.load_verify_locations(cadata=self.authority)
        return ctx

    async def _tls_check(self, ctx: ssl.SSLContext) -> None:
        """A TLS handshake alone, verified as the link's will be: trio-websocket reports a failed one only as a
        ConnectionTimeout, so its reason (not trusted, wrong name, expired) would be lost (crew.md §2)."""
        parts = urlsplit(self.url)
        with trio.fail_after(CONNECT_TIMEOUT):
            stream = await trio.open_ssl_over_tcp_stream(parts.hostname or "", parts.port or 443, ssl_context=ctx,
                                                         https_compatible=True)
            try:
                await stream.do_handshake()
            finally:
                await trio.aclose_forcefully(stream)

    def new_core(self) -> MemberCore:
        """The protocol state of one new link (collie.crew.membercore): its handshake, frames, answers and beats."""
        return MemberCore(self.cfg.label, self.boot, agents=self.bridge.readers, write_type=WriteRequest)

    async def _connect_once(self) -> None:
        ctx = await self._tls_context()
        if ctx is not None:
            await self._tls_check(ctx)
        headers = [(b"authorization", f"Bearer {self.cfg.token}".encode())]
        self._loopback_check()  # the port's listener, before the token is sent
        async with open_websocket_url(self.url, ssl_context=ctx, extra_headers=headers,
                                      connect_timeout=CONNECT_TIMEOUT, disconnect_timeout=2,
                                      max_message_size=crewwire.MAX_FRAME) as ws:
            if not isinstance(ws.remote, str):  # TCP: this very connection's other end
                self._loopback_check((str(ws.remote.address), ws.remote.port), (str(ws.local.address), ws.local.port))
            core = self.new_core()
            await ws.send_message(crewwire.encode(core.hello(trio.current_time())))
            with trio.fail_at(core.welcome_by):
                raw = await ws.get_message()
            welcome = core.receive(raw, trio.current_time()).welcome  # FrameError: not a welcome
            self.status.connected, self.status.since = True, time.time()
            self.status.last_contact, self.status.last_error = time.time(), None
            self.status.connects += 1
            self.up_at = trio.current_time()
            self.status.read_only = welcome.read_only
            log.info("[crew] connected to the lead at %s as %s", self.url, self.cfg.label)
            await self._session(ws, core)

    async def _session(self, ws, core: MemberCore) -> None:
        """A welcomed link: the lead's frames fed to `core`, its events carried out (each write and read in
        a task of its own, so none holds up the next frame)."""
        self.core = core
        send_lock = trio.Lock()

        async def send(msg) -> None:
            async with send_lock:
                await ws.send_message(msg if isinstance(msg, str) else crewwire.encode(msg))

        try:
            async with trio.open_nursery() as n:
                n.start_soon(self._publish, send)
                n.start_soon(self._beat, send, ws)
                while True:
                    raw = await ws.get_message()
                    self.status.last_contact = time.time()
                    event = core.receive(raw, trio.current_time())
                    if isinstance(event, Watch):
                        self.bridge.set_viewing(event.agent, event.on)
                    elif isinstance(event, Write):
                        n.start_soon(self._request, send, event)
                    elif isinstance(event, Lookup):
                        n.start_soon(self._read, send, event)
                    elif isinstance(event, Answer):
                        await send(event.frame)
                    elif isinstance(event, Misfit):
                        await self._bad_frame(send, event.error)
                    elif isinstance(event, Ignored) and event.line:
                        log.info("[crew] %s", event.line)
        finally:
            core.close()

    async def _bad_frame(self, send, exc: crewwire.FrameError) -> None:
        """A frame from the lead that does not fit the crew wire: a request or read naming its id is answered at
        once with what was wrong (a request refused `bad_request`: nothing reached the agent), so the lead
        never waits out its time limit; any other is logged (escaped; BAD_LINES a minute at most) and dropped."""
        misfit = Misfit(exc)
        if self.bad_lines.allow(trio.current_time()):
            log.info("[crew] %s", misfit.line)
        if misfit.answer is not None:
            await send(misfit.answer)

    async def _publish(self, send) -> None:
        """A snapshot, then only what changed (see Coalescer)."""
        # Only the agents that changed are looked at (the bridge names them): building and comparing
        # every agent's view on every change cost the member most of its CPU per write (issue 15.1).
        dirty: dict[str, None] = {}  # in the order they changed; a change while a frame is sent is kept
        changed = trio.Event()

        def on_change(name: str) -> None:
            dirty[name] = None
            changed.set()

        coalescer = Coalescer(MIN_GAP)
        self.bridge.on_agent_change.append(on_change)
        try:
            views = [agent_view(self.bridge, name) for name in self.bridge.readers]
            for frame in snapshot_frames([(v["name"], crewwire.encode(v)) for v in views]):
                await send(frame)
            now = trio.current_time()
            for v in views:
                coalescer.mark(v["name"], json.dumps(v, sort_keys=True), now, view_shape(v))
            waiting: dict[str, float] = {}  # agents held by the gap -> when they may go
            while True:
                if not dirty:
                    due = min(waiting.values(), default=math.inf) - trio.current_time()
                    with trio.move_on_after(max(0.0, due)):
                        await changed.wait()
                changed = trio.Event()
                now = trio.current_time()
                names = [*dirty, *(name for name, at in waiting.items() if at <= now and name not in dirty)]
                dirty.clear()
                for name in names:
                    if name not in self.bridge.readers:
                        waiting.pop(name, None)
                        continue
                    view = agent_view(self.bridge, name)
                    key = json.dumps(view, sort_keys=True)
                    shape = view_shape(view)
                    poller = getattr(self.bridge, "pollers", {}).get(name)
                    gap = VIEWED_GAP if poller is not None and poller.viewers else None
                    wait = coalescer.decide(name, key, trio.current_time(), shape, gap)
                    if wait == 0:
                        waiting.pop(name, None)
                        await send(agent_frame(name, view))
                        coalescer.mark(name, key, trio.current_time(), shape)
                    elif wait is not None:
                        waiting[name] = trio.current_time() + wait
                    else:
                        waiting.pop(name, None)
        finally:
            self.bridge.on_agent_change.remove(on_change)

    async def _beat(self, send, ws) -> None:
        """A beat when the core says one is due, and a ping the lead must answer within PONG_WAIT."""
        while True:
            await trio.sleep_until(self.core.next_beat)
            await send(self.core.beat(trio.current_time()))
            with trio.fail_after(PONG_WAIT):
                await ws.ping()

    async def _request(self, send, write: Write) -> None:
        req = write.request
        rec = await self.writer.write(req, caller_locked=True)
        await send(self.core.receipt(write.frame.id, rec))
        if rec.outcome in ("sent", "started") and rec.turn is not None and req.agent in self.bridge.readers:
            await self._follow_turn(req.agent, rec.conversation or req.conversation, rec.turn)

    async def _follow_turn(self, agent: str, conversation: str | None, turn: int) -> None:
        """The lead's inbox runs the next item for this agent once the turn a write started has ended
        (crew.md §4): read the agent at once after each change until that is seen, as the lead does for
        its own agents (`Bridge.read_soon`), instead of one read per burst gap (issue 16.1)."""
        with trio.move_on_after(FOLLOW_TURN_MAX):
            while True:
                conv = self.bridge.readers[agent].conversations.get(conversation or "")
                if conv is None or conv.turn is None or conv.turn > turn or (conv.turn == turn and conv.state != "working"):
                    return
                self.bridge.read_soon(agent)
                await self.bridge.wait_changed()

    async def _read(self, send, lookup: Lookup) -> None:
        frame, args = lookup.frame, lookup.args
        agent, what = frame.agent, frame.what
        result, ok = None, True
        try:
            if what == "items":
                conv, since = args.conversation, args.since or 0
                tapped = await self.writer.journal.run(self.writer.journal.tapped_asks, agent)
                if args.newest is not None:  # issue 39: the newest page by position (crew.md §2)
                    if conv in self.bridge.readers[agent].conversations:
                        page = self.bridge.items_newest(agent, conv, args.newest, args.before)
                        result = {**page, "open": True}
                    else:
                        page = newest_of(await self.bridge.read_items_through(agent, conv), args.newest, args.before)
                        result = {**page, "open": False}
                    result = fit_items({**result, "items": chat_items(result["items"], tapped)})
                elif conv in self.bridge.readers[agent].conversations:
                    result = {"items": chat_items(self.bridge.items(agent, conv, since), tapped), "open": True}
                else:
                    items = await self.bridge.read_items_through(agent, conv)
                    result = {"items": chat_items([i for i in items if i["seq"] > since], tapped), "open": False}
                result = fit_items(result)
            elif what == "closed":
                got = await self.bridge.read_closed(agent, args.cursor)
                result = {"closed": got.conversations, "next": got.next, "footer": got.footer, "reason": got.reason}
            elif what == "recent_sends":
                result = {"lines": self.writer.recent_sends(agent, args.conversation)}
        except Exception as exc:  # a failed read is an answer, not a dead link
            ok, result = False, {"error": f"{type(exc).__name__}: {exc}"}
        await send(self.core.read_result(frame.id, ok, result))  # too large for a frame: `ok: false`

"""A durable agent written from docs/wire-v1.md alone, in another style than crew/sdk.

asyncio streams and a hand-written HTTP/1.1 parser on a 0600 Unix socket in a 0700 folder. It
answers in every spec-legal way it can, rotating per answer (``--styles``): plain Content-Length,
odd header case, chunked bodies (seven-byte chunks, chunk extensions, a trailer), ``Connection:
close`` after the answer, and a body that ends where the connection does. Its JSON carries unknown
fields everywhere (floats, a number past 2^53, nulls), its ids need percent-encoding, its texts are
unicode; its RFC 8785 digest is its own (ECMAScript number forms). Turns survive a restart; with
``INDIE_REV_FROM_ONE=1`` its ``rev`` starts over (legal, wire §3); ``INDIE_VARIANTS=noecho`` makes
its `user` items leave out the request id (C4).

Durable: every applied write is written to ``<dir>/state.json`` (temp, fsync, rename) and to the
ledger ``<dir>/ledger.jsonl`` (fsynced) *before* the answer goes out, so a kill at any moment
leaves a true record of what the agent did. ``<dir>/fault`` (one line, read once and removed
before acting) acts on the next write: ``before`` (die: request read, nothing done), ``after`` (die:
applied, no answer), ``mid`` (die: applied, half an answer written), ``conflict`` (answer 400
conflict, nothing done), ``mutate`` (the ask changes just before the answer is judged),
``answer:<json>`` (applied, answered with that JSON instead), ``hold:<seconds>`` (applied, answered
that much later: the write holds its conversation's lock meanwhile).

Run: python -m tests.independent_agent DIR   (the socket is DIR/sock/agent.sock)
"""

from __future__ import annotations

import asyncio
import decimal
import hashlib
import json
import os
import secrets
import socket
import struct
import sys
import time
import urllib.parse

INSTANCE = secrets.token_hex(6)
TEXT_MAX = 2000
STYLES = ["plain", "cases", "chunked", "close", "eof"]


def jcs(value) -> str:
    """RFC 8785 canonical form (keys here are ASCII, so code-point order is UTF-16 order)."""
    if value is None or value is True or value is False:
        return json.dumps(value)
    if isinstance(value, int) and abs(value) < 2**53:
        return str(value)
    if isinstance(value, int):
        value = float(value)  # RFC 8785 numbers are IEEE 754 doubles
    if isinstance(value, float):
        return es_number(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ",".join(jcs(v) for v in value) + "]"
    return "{" + ",".join(jcs(k) + ":" + jcs(value[k]) for k in sorted(value)) + "}"


def es_number(x: float) -> str:
    """ECMAScript Number::toString, which RFC 8785 uses for every number (shortest round-trip digits)."""
    if x == 0:
        return "0"
    sign = "-" if x < 0 else ""
    t = decimal.Decimal(repr(abs(x))).normalize().as_tuple()
    d = "".join(map(str, t.digits))
    k, n = len(d), len(t.digits) + t.exponent
    if k <= n <= 21:
        return sign + d + "0" * (n - k)
    if 0 < n <= 21:
        return sign + d[:n] + "." + d[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + d
    e = n - 1
    return sign + d[0] + ("." + d[1:] if k > 1 else "") + "e" + ("+" if e >= 0 else "-") + str(abs(e))


def digest(ask) -> str:
    return hashlib.sha256(jcs(ask).encode()).hexdigest()


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


CONV_ID = "deploy q?#%& +;=@[]"  # every character here needs percent-encoding or care in a path
ASK_PERM = "perm ?#%"


def seed() -> dict:
    """The first state of a fresh agent (unicode in every text)."""
    conv = {
        "id": CONV_ID, "title": "Déploiement 🚀 ünïcödé", "subtitle": "ça marche\u2028ligne",
        "workspace": {"id": "ws 1", "title": "Espace ✓", "x_extra": [1, 2]},
        "tab": {"id": "main", "title": "Haupt"}, "harness": "indep", "state": "idle", "turn": 0,
        "activity": now_iso(), "progress": {"steps": ["Plän", "Sävé", "Rëport"], "current": 1},
        "asks": [], "items": [], "queued": [], "closed": False, "closed_at": None,
        "actions": [
            {"id": "ship it?#", "label": "Ship it 🚢", "icon": "send", "busy": False, "disabled": False},
            {"id": "busy one", "label": "Busy", "icon": None, "busy": True, "disabled": False},
            {"id": "off", "label": "Disabled", "icon": None, "busy": False, "disabled": True},
            {"id": "a4", "label": "A label longer than sixteen", "icon": None, "busy": False, "disabled": False},
            {"id": "a5", "label": "fifth (dropped)", "icon": None, "busy": False, "disabled": False},
        ],
    }
    return {"rev": 1, "items_rev": 0, "convs": {CONV_ID: conv}, "requests": {}, "next_conv": 1, "next_ask": 1}


VARIANTS = set(filter(None, os.environ.get("INDIE_VARIANTS", "").split(",")))  # noecho


class Agent:
    def __init__(self, folder: str, styles: list[str]):
        self.folder = folder
        self.styles = styles
        self.count = 0
        self.changed = asyncio.Event()
        path = os.path.join(folder, "state.json")
        if os.path.exists(path):
            with open(path) as f:
                self.s = json.load(f)
        else:
            self.s = seed()
        if os.environ.get("INDIE_REV_FROM_ONE"):
            self.s["rev"] = 1  # spec-legal: a restarted agent's rev may start over (wire §3); turns survive
        self.ledger = open(os.path.join(folder, "ledger.jsonl"), "a")

    # -- durability -----------------------------------------------------------------------
    def save(self, entry: dict | None) -> None:
        path = os.path.join(self.folder, "state.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.s, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        if entry is not None:
            self.ledger.write(json.dumps(entry) + "\n")
            self.ledger.flush()
            os.fsync(self.ledger.fileno())

    def bump(self) -> None:
        self.s["rev"] += 1
        self.changed.set()
        self.changed = asyncio.Event()

    def item(self, conv: dict, kind: str, **fields) -> dict:
        self.s["items_rev"] += 1
        it = {"seq": len(conv["items"]) + conv.get("dropped", 0) + 1, "rev": self.s["items_rev"],
              "id": f"it-{self.s['items_rev']}", "kind": kind, "turn": conv["turn"], "at": now_iso(),
              "x_unknown": {"nested": None}, **fields}
        conv["items"].append(it)
        conv["activity"] = now_iso()
        return it

    # -- the agent's own behaviour --------------------------------------------------------
    def start_turn(self, conv: dict, text: str, request_id: str | None) -> None:
        conv["turn"] += 1
        conv["state"] = "working"
        echo = {} if "noecho" in VARIANTS else {"request_id": request_id}  # C4: an agent that cannot echo it
        self.item(conv, "user", text=text, final=True, **echo)
        if text.startswith("hold"):
            self.item(conv, "reply", text="Je travaille… ", final=False)
            return
        if text.startswith("ask "):
            self.raise_ask(conv, text.split(" ", 1)[1])
            return
        self.end_turn(conv, f"Réponse à « {text[:50]} » ✓", stopped=False)

    def end_turn(self, conv: dict, reply: str | None, *, stopped: bool) -> None:
        if reply:
            self.item(conv, "reply", text=reply, final=True)
        self.item(conv, "turn_end", stopped=stopped)
        conv["state"] = "idle"
        if conv["queued"] and not stopped:
            text, rid = conv["queued"].pop(0)
            self.start_turn(conv, text, rid)

    def raise_ask(self, conv: dict, kind: str) -> None:
        n = self.s["next_ask"]
        self.s["next_ask"] += 1
        aid = f"{ASK_PERM}-{INSTANCE}-{n}" if kind == "permission" else f"a {kind}-{INSTANCE}-{n}"
        self.item(conv, "tool", tool_call_id=f"tc {n}", name="deploy", title="Déployer", status="running", output="")
        it = self.item(conv, "ask", ask_id=aid, tool_call_id=f"tc {n}", title=f"Question {kind} ?", end=None)
        ask = {"id": aid, "kind": kind, "tool_call_id": f"tc {n}", "item_id": it["id"],
               "title": f"Faut-il déployer ? ({kind}) 🚀", "x_future": {"score": 1.0, "tiny": 1e-7, "n": None, "ns": 1764460800123456789}}
        if kind == "permission":
            ask.update(tool="deploy", body="Trois services redémarrent.\nOK ?", options=[
                {"id": "yes", "label": "Oui ✓", "role": "allow"},
                {"id": "always", "label": "Toujours", "role": "always_allow"},
                {"id": "no", "label": "Non", "role": "deny"},
                {"id": "stop", "label": "Annuler", "role": "cancel", "x": 1}],
                push={"title": "Déploiement", "line": "staging, 3 services"},
                expires_at="2099-01-01T00:00:00Z")
        elif kind == "choice":
            ask.update(multiple=True, options=[{"id": "a b", "label": "Alpha"}, {"id": "β", "label": "Bêta"}])
        elif kind == "text":
            ask.update(max_length=2000, placeholder="écrivez…")
        elif kind == "form":
            ask.update(fields=[
                {"id": "env", "label": "Env", "type": "select", "required": True,
                 "options": [{"id": "staging", "label": "Staging"}, {"id": "prod", "label": "Prod"}]},
                {"id": "note", "label": "Note", "type": "text", "required": False, "max_length": 40},
                {"id": "force", "label": "Force", "type": "toggle", "required": False, "default": False}])
        conv["asks"].append(ask)
        conv["state"] = "waiting"

    # -- writes ---------------------------------------------------------------------------
    def write(self, route: str, target: str, body: dict) -> dict:
        rid = body.get("request_id")
        if not isinstance(rid, str) or not rid:
            raise HTTPError(400, "bad_request", "request_id is required")
        key = json.dumps([route, target, body], sort_keys=True)
        old = self.s["requests"].get(rid)
        if old is not None:
            if old["key"] != key:
                raise HTTPError(400, "conflict", "this request id came with another body")
            return {**old["outcome"], "replay": True}
        outcome = self.apply(route, target, body)
        self.s["requests"][rid] = {"key": key, "outcome": outcome, "at": time.time()}
        self.bump()
        self.save({"request_id": rid, "route": route, "target": target, "outcome": outcome})
        return outcome

    def conv(self, cid: str) -> dict:
        conv = self.s["convs"].get(cid)
        if conv is None:
            raise HTTPError(404, "not_found", f"no conversation {cid!r}")
        return conv

    def apply(self, route: str, target: str, body: dict) -> dict:
        if route == "starter":
            if target != "triage ?#1" and target != "plain":
                raise HTTPError(404, "not_found", "no such starter")
            cid = f"s {self.s['next_conv']}"
            self.s["next_conv"] += 1
            conv = seed()["convs"][CONV_ID] | {"id": cid, "title": "Trier la boîte", "items": [], "actions": []}
            self.s["convs"][cid] = conv
            self.start_turn(conv, "Trier la boîte", None)
            return {"outcome": "started", "conversation": cid, "turn": conv["turn"], "message": "C'est parti"}
        if route == "answer":
            for conv in self.s["convs"].values():
                for ask in conv["asks"]:
                    if ask["id"] == target:
                        return self.answer(conv, ask, body)
            return {"outcome": "not_open"}
        cid, _, op = target.partition("\0")
        conv = self.conv(cid)
        turn = body.get("turn")
        if route == "send":
            if conv["closed"]:
                return {"outcome": "refused", "reason": "closed"}
            if turn != conv["turn"]:
                return {"outcome": "refused", "reason": "turn_moved"}
            if any(c["asks"] for c in [conv]):
                return {"outcome": "refused", "reason": "ask_open"}
            if len(body["text"]) > TEXT_MAX:
                return {"outcome": "refused", "reason": "too_long"}
            if conv["state"] == "working":
                conv["queued"].append([body["text"], body["request_id"]])
                return {"outcome": "queued", "turn": conv["turn"], "message": "après ce tour"}
            self.start_turn(conv, body["text"], body["request_id"])
            return {"outcome": "sent", "turn": conv["turn"], "message": "reçu ✓"}
        if route == "steer":
            if turn != conv["turn"]:
                return {"outcome": "refused", "reason": "turn_moved"}
            if conv["state"] != "working":
                return {"outcome": "refused", "reason": "not_running"}
            self.item(conv, "notice", text=f"steer: {body['text']}", final=True)
            return {"outcome": "sent"}
        if route == "abort":
            if turn != conv["turn"]:
                return {"outcome": "refused", "reason": "turn_moved"}
            if conv["state"] != "working":
                return {"outcome": "refused", "reason": "not_running"}
            conv["queued"].clear()
            self.end_turn(conv, None, stopped=True)
            return {"outcome": "stopped"}
        if route == "action":
            if turn != conv["turn"]:
                return {"outcome": "refused", "reason": "turn_moved"}
            act = next((a for a in conv["actions"] if a["id"] == op), None)
            if act is None:
                return {"outcome": "refused", "reason": "not_found"}
            if act["busy"]:
                return {"outcome": "refused", "reason": "busy"}
            if act["disabled"]:
                return {"outcome": "refused", "reason": "disabled"}
            self.item(conv, "notice", text=f"action {op} ✓", final=True)
            return {"outcome": "done"}
        if route == "rename":
            conv["title"] = body["title"]
            return {"outcome": "done"}
        if route == "close":
            conv["closed"] = True
            conv["closed_at"] = now_iso()
            return {"outcome": "done"}
        if route == "reopen":
            if not conv["closed"]:
                return {"outcome": "refused", "reason": "not_found"}
            conv["closed"] = False
            return {"outcome": "done"}
        raise HTTPError(404, "not_found", "no such route")

    def answer(self, conv: dict, ask: dict, body: dict) -> dict:
        if body.get("digest") != digest(ask):
            return {"outcome": "changed"}
        kind = ask["kind"]
        if kind in ("permission", "choice"):
            ids = body.get("option_ids")
            valid = {o["id"] for o in ask["options"]}
            if not isinstance(ids, list) or not ids or not set(ids) <= valid or (kind == "permission" and len(ids) != 1):
                return {"outcome": "invalid", "message": "pas une option"}
        elif kind == "text":
            if not isinstance(body.get("text"), str):
                return {"outcome": "invalid", "message": "du texte, svp"}
        elif kind == "form":
            if not isinstance(body.get("fields"), dict) or "env" not in body["fields"]:
                return {"outcome": "invalid", "message": "env manque"}
        conv["asks"].remove(ask)
        for it in conv["items"]:
            if it["kind"] == "ask" and it["ask_id"] == ask["id"]:
                self.s["items_rev"] += 1
                it["end"] = "answered"
                it["rev"] = self.s["items_rev"]
        self.end_turn(conv, f"Réponse reçue: {json.dumps(body, ensure_ascii=False)[:80]}", stopped=False)
        return {"outcome": "accepted", "message": "merci"}

    # -- reads ----------------------------------------------------------------------------
    def state_doc(self) -> dict:
        convs = []
        for c in self.s["convs"].values():
            if c["closed"]:
                continue
            keys = ("id", "title", "subtitle", "workspace", "tab", "harness", "state", "turn", "activity", "progress",
                    "asks", "actions")
            convs.append({k: c[k] for k in keys}
                         | {"items_rev": max((i["rev"] for i in c["items"]), default=0), "x_new": "ignored?"})
        return {"rev": self.s["rev"], "instance": INSTANCE, "subtitle": "Agent indépendant ✓",
                "conversations": convs, "x_top": {"a": [None]},
                "starters": [{"id": "triage ?#1", "label": "Trier 📥"},
                             {"id": "plain", "label": "Plain"}]}

    def items(self, cid: str, query: dict) -> dict:
        conv = self.conv(cid)
        since = int(query.get("since", ["0"])[0])
        limit = min(int(query.get("limit", ["500"])[0]), 1000)
        items_rev = max((i["rev"] for i in conv["items"]), default=0)
        above = sorted((i for i in conv["items"] if i["rev"] > since), key=lambda i: i["rev"])
        page = above[:limit]
        first = conv["items"][0]["seq"] if conv["items"] else 1
        return {"items": page, "first_kept": first, "last": conv["items"][-1]["seq"] if conv["items"] else 0,
                "items_rev": items_rev, "next_since": page[-1]["rev"] if page else items_rev,
                "more": len(above) > len(page), "x_page": True}

    def closed(self, query: dict) -> dict:
        rows = [c for c in self.s["convs"].values() if c["closed"]]
        rows.sort(key=lambda c: c["closed_at"], reverse=True)
        start = int(query.get("cursor", ["0"])[0] or 0)
        limit = min(int(query.get("limit", ["100"])[0]), 100)
        page = rows[start:start + limit]
        nxt = str(start + limit) if start + limit < len(rows) else None
        return {"conversations": [{"id": c["id"], "title": c["title"], "subtitle": c["subtitle"],
                                   "closed_at": c["closed_at"], "activity": c["activity"]} for c in page],
                "next": nxt}


class HTTPError(Exception):
    def __init__(self, status: int, code: str, message: str):
        self.status, self.code, self.message = status, code, message


REASONS = {200: "OK", 304: "Not Modified", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
           404: "Not Found", 409: "Conflict", 500: "Internal Server Error"}


async def read_request(reader: asyncio.StreamReader):
    line = await reader.readline()
    if not line:
        return None
    method, target, _version = line.decode("latin-1").rstrip("\r\n").split(" ")
    headers = {}
    while True:
        h = (await reader.readline()).decode("latin-1").rstrip("\r\n")
        if not h:
            break
        k, _, v = h.partition(":")
        headers[k.strip().lower()] = v.strip()
    body = b""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b""):
                    pass
                break
            body += await reader.readexactly(size)
            await reader.readline()
    elif "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    return method, target, headers, body


def encode(status: int, doc, style: str, extra: dict) -> bytes:
    body = b"" if doc is None else json.dumps(doc, ensure_ascii=False).encode()
    names = {"plain": ("Content-Type", "Content-Length", "ETag", "Connection", "Transfer-Encoding"),
             "cases": ("cOnTeNt-TyPe", "CONTENT-LENGTH", "etag", "CONNECTION", "transfer-encoding")}
    ct, cl, et, cn, te = names["cases" if style == "cases" else "plain"]
    lines = [f"HTTP/1.1 {status} {REASONS[status]}"]
    if doc is not None:
        lines.append(f"{ct}: " + ("application/json;charset=UTF-8" if style == "cases" else "application/json; charset=utf-8"))
    if "etag" in extra:
        lines.append(f"{et}: {extra['etag']}")
    lines.append("X-Unknown-Header: ünï".encode().decode("latin-1"))
    if style == "close":
        lines.append(f"{cn}: close")
    if style == "eof" and status != 304:  # HTTP/1.1 body delimited by the connection's close (RFC 9112 §6.3)
        lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    if style == "chunked" and status != 304:
        lines.append(f"{te}: chunked")
        lines.append("Trailer: X-Done")
        out = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        for i in range(0, len(body), 7):
            piece = body[i:i + 7]
            out += f"{len(piece):x};ext=1\r\n".encode() + piece + b"\r\n"
        return out + b"0\r\nX-Done: yes\r\n\r\n"
    if status != 304:
        lines.append(f"{cl}: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


WRITE_ROUTES = {"send", "steer", "abort", "rename", "close", "reopen"}


class Server:
    def __init__(self, agent: Agent):
        self.agent = agent

    def fault(self) -> str | None:
        path = os.path.join(self.agent.folder, "fault")
        try:
            with open(path) as f:
                what = f.read().strip()
        except FileNotFoundError:
            return None
        os.unlink(path)
        return what

    def caller_forbidden(self, writer) -> bool:
        sock = writer.get_extra_info("socket")
        pid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
        if pid in (os.getpid(), os.getppid()):
            return True
        try:  # a descendant of ours?
            while pid > 1:
                with open(f"/proc/{pid}/stat") as f:
                    pid = int(f.read().rsplit(")", 1)[1].split()[1])
                if pid == os.getpid():
                    return True
        except (OSError, ValueError):
            pass
        return False

    async def handle(self, reader, writer):
        try:
            while True:
                req = await read_request(reader)
                if req is None:
                    return
                method, target, headers, body = req
                style = self.agent.styles[self.agent.count % len(self.agent.styles)]
                self.agent.count += 1
                extra: dict = {}
                try:
                    status, doc = await self.route(method, target, headers, body, extra, writer)
                except HTTPError as e:
                    status, doc = e.status, {"error": e.code, "message": e.message, "x_more": 1}
                if "die_mid" in extra:
                    data = encode(status, doc, "plain", extra)
                    writer.write(data[: len(data) // 2])
                    await writer.drain()
                    os._exit(9)
                writer.write(encode(status, doc, style, extra))
                await writer.drain()
                if style in ("close", "eof"):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def route(self, method, target, headers, body, extra, writer):
        a = self.agent
        url = urllib.parse.urlsplit(target)
        raw = url.path.split("/")
        parts = [urllib.parse.unquote(p) for p in raw]
        query = urllib.parse.parse_qs(url.query)
        log("req", method, target, headers.get("if-none-match", ""))
        if method == "POST" and url.path == "/hello":
            log("hello", body.decode())
            return 200, {"wire": {"min": 1, "max": 1}, "runtime": "indie-durable", "subtitle": "Agent indépendant ✓",
                         "instance": INSTANCE, "caps": ["asks", "send", "steer", "abort", "starters", "rename",
                                                        "close", "reopen", "actions", "history", "watch", "x-future"],
                         "limits": {"text_max": TEXT_MAX, "x_other": 5}, "x_unknown": True}
        if parts[:2] != ["", "v1"]:
            raise HTTPError(404, "not_found", "no such route")
        if method == "GET" and parts[2:] == ["state"]:
            wait = int(query.get("wait", ["0"])[0])
            tag = f'"{INSTANCE}.{a.s["rev"]}"'
            if headers.get("if-none-match") == tag:
                if wait:
                    try:
                        await asyncio.wait_for(a.changed.wait(), min(wait, 30))
                    except asyncio.TimeoutError:
                        pass
                if headers.get("if-none-match") == f'"{INSTANCE}.{a.s["rev"]}"':
                    extra["etag"] = tag
                    return 304, None
            extra["etag"] = f'"{INSTANCE}.{a.s["rev"]}"'
            return 200, a.state_doc()
        if method == "GET" and parts[2:3] == ["conversations"] and len(parts) == 3:
            return 200, a.closed(query)
        if method == "GET" and len(parts) == 5 and parts[2] == "conversations" and parts[4] == "items":
            return 200, a.items(parts[3], query)
        if method != "POST":
            raise HTTPError(404, "not_found", "no such route")
        try:
            doc = json.loads(body)
        except ValueError:
            raise HTTPError(400, "bad_request", "not JSON")
        if self.caller_forbidden(writer):
            raise HTTPError(403, "unauthorized", "a write from my own family")
        if len(parts) == 5 and parts[2] == "asks" and parts[4] == "answer":
            route, tgt = "answer", parts[3]
        elif len(parts) == 4 and parts[2] == "starters":
            route, tgt = "starter", parts[3]
        elif len(parts) == 5 and parts[2] == "conversations" and parts[4] in WRITE_ROUTES:
            route, tgt = parts[4], parts[3]
        elif len(parts) == 6 and parts[2] == "conversations" and parts[4] == "actions":
            route, tgt = "action", parts[3] + "\0" + parts[5]
        else:
            raise HTTPError(404, "not_found", "no such route")
        route_name = {"abort": "abort"}.get(route, route)
        fault = self.fault()
        log("write", route_name, repr(tgt), json.dumps(doc, ensure_ascii=False), "fault", fault)
        if fault == "before":
            os._exit(9)
        if fault == "conflict":  # answered with an error; nothing applied
            raise HTTPError(400, "conflict", "fault")
        if fault == "mutate":  # the ask changes just before this answer is judged (the §4 race)
            for conv in a.s["convs"].values():
                for ask in conv["asks"]:
                    ask["title"] += " (v2)"
            a.bump()
        out = a.write(route_name, tgt, doc)
        if fault and fault.startswith("hold:"):  # applied at once, answered this many seconds later
            await asyncio.sleep(float(fault[len("hold:"):]))
        if fault and fault.startswith("answer:"):  # applied, then answered with this JSON instead
            return 200, json.loads(fault[len("answer:"):])
        if fault == "after":
            os._exit(9)
        if fault == "mid":
            extra["die_mid"] = True
        return 200, out | {"x_extra": {"k": [1.5]}}


def log(*words) -> None:
    print(*words, file=sys.stderr, flush=True)


async def main(folder: str, styles: list[str]) -> None:
    os.makedirs(os.path.join(folder, "sock"), mode=0o700, exist_ok=True)
    path = os.path.join(folder, "sock", "agent.sock")
    if os.path.exists(path):
        os.unlink(path)
    old = os.umask(0o177)
    server = await asyncio.start_unix_server(Server(Agent(folder, styles)).handle, path=path)
    os.umask(old)
    print("listening", path, flush=True)
    log("instance", INSTANCE)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    styles = os.environ.get("INDIE_STYLES", ",".join(STYLES)).split(",")
    if "--styles" in sys.argv:
        styles = sys.argv[sys.argv.index("--styles") + 1].split(",")
    asyncio.run(main(sys.argv[1], styles))

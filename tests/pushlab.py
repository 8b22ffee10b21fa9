"""A fake Web Push service for the tests: it receives the real HTTP request on loopback, checks the
VAPID signature, and decrypts the payload with the subscription's private key — as a browser would."""

from __future__ import annotations

import base64
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import http_ece
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat


def b64e(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


class Subscriber:
    """A browser's side of a subscription: its keys, and the JSON it would register."""

    def __init__(self, endpoint: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.auth = os.urandom(16)
        self.endpoint = endpoint

    def json(self) -> dict:
        point = self.key.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
        return {"endpoint": self.endpoint, "keys": {"p256dh": b64e(point), "auth": b64e(self.auth)}}

    def decrypt(self, body: bytes) -> dict:
        return json.loads(http_ece.decrypt(body, private_key=self.key, auth_secret=self.auth, version="aes128gcm"))


class FakePushService:
    """`/ok/<name>` accepts (201), `/gone/<name>` answers 410, `/busy/<name>` 429 once then 201."""

    def __init__(self) -> None:
        self.received: list[dict] = []
        self.cond = threading.Condition()
        self.busy_seen: set[str] = set()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                path = self.path
                status = 201
                if path.startswith("/gone/"):
                    status = 410
                elif path.startswith("/busy/") and path not in outer.busy_seen:
                    outer.busy_seen.add(path)
                    status = 429
                with outer.cond:
                    outer.received.append({"path": path, "headers": dict(self.headers), "body": body, "status": status})
                    outer.cond.notify_all()
                self.send_response(status)
                if status == 429:
                    self.send_header("Retry-After", "1")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait(self, pred, timeout: float = 20.0) -> dict:
        import time

        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for r in self.received:
                    if pred(r):
                        return r
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no such push; got {[r['path'] for r in self.received]}")
                self.cond.wait(left)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

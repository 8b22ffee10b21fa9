"""The lead's JSON API for the phone (shared/spec/phone-api.md; documented in docs/phone-api.md).

Every `/api` route needs the local API credential as `Authorization: Bearer <token>` (until phones
can pair): a 32-byte random token the lead makes at first start, kept in `<state>/api-token` (0600)
and compared in constant time. No `/api` route answers anyone else — a local process must not be
able to answer an agent's ask. An API token (features I10) opens only the inbox routes marked
`@open_to_senders`: the door (`collie.lead.door.policy`) authorizes the route that matched, never the path text.
Writes answer 200 with a receipt (a refusal is a receipt too); malformed requests answer 400, unknown
routes, machines, agents or conversations 404 — every error as JSON `{"error", "message"}`.

The routes live in `collie.lead.routes`, one module per resource; `create_api` registers them in order (the
door first, so it runs before any handler).
"""

from __future__ import annotations

import os
import secrets

from quart import Quart

from collie.bridge.bridge import Bridge
from collie.bridge.writer import Writer
from collie.crew.fsutil import atomic_write
from collie.crew.paths import Paths
from collie.lead.door.packing import install_packing
from collie.lead.routes import auth, reads, writes


def load_or_create_credential(paths: Paths) -> tuple[str, bool]:
    """The local API credential; (token, created). Never logged or printed."""
    path = paths.state_dir / "api-token"
    try:
        token = path.read_text().strip()
        if len(token) >= 64:
            if (path.stat().st_mode & 0o777) != 0o600:
                os.chmod(path, 0o600)
            return token, False
    except FileNotFoundError:
        pass
    token = secrets.token_hex(32)
    atomic_write(path, (token + "\n").encode(), mode=0o600)
    return token, True



def create_api(app: Quart, bridge: Bridge, writer: Writer, credential: str, hub=None, *, door=None,
               devices=None, feed=None, redact_on: bool = True, stops=None, inbox=None) -> None:
    """Add the /api routes to `app`. `hub` (collie.lead.members.hub.Hub) routes members' machines; `door`
    (collie.lead.door.pairing.Door) guards Host and Origin; `devices` (collie.lead.door.devices.Devices) knows paired phones;
    `inbox` (collie.lead.inbox.service.Inbox), when given, takes every send and starter (I1)."""
    auth.register(app, credential, hub, door=door, devices=devices)
    install_packing(app)  # issue 39: JSON answers gzipped when accepted, GET reads revalidated by ETag
    if feed is not None:
        feed.redact_on = redact_on  # X1: the live channel's panes are masked like this API's
    reads.register(app, bridge, writer, hub, feed=feed, redact_on=redact_on, inbox=inbox)
    writes.register(app, bridge, writer, hub, stops=stops, inbox=inbox)

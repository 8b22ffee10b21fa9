"""Fix for a shutdown hang with quart-trio 0.12 + hypercorn 0.18's trio worker.

After an HTTP/1.1 response hypercorn sends itself ``Updated(idle=True)`` to re-arm the keep-alive
timer, but quart-trio has already cancelled the per-request nursery it runs in, so the re-arm is
cancelled and an idle connection never closes: every shutdown then waits the whole
``graceful_timeout``. Shielding that one event restores the timer. Installed once, before serving;
`tests/test_http_server.py` fails without it.
"""

from __future__ import annotations

import trio
from hypercorn.events import Updated
from hypercorn.trio import run as hypercorn_run
from hypercorn.trio.tcp_server import TCPServer


class ShieldedIdleTCPServer(TCPServer):
    async def protocol_send(self, event) -> None:
        if isinstance(event, Updated) and event.idle:
            with trio.CancelScope(shield=True):
                await super().protocol_send(event)
        else:
            await super().protocol_send(event)


def install() -> None:
    hypercorn_run.TCPServer = ShieldedIdleTCPServer

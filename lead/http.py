"""The lead's HTTP server: the phone's API and (later) its web app.

`serve_http` follows hypercorn's own shape: report the bound addresses through `task_status`, run
until `shutdown` is set, then give open connections a short graceful deadline.
"""

from __future__ import annotations

from functools import partial

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from quart_trio import QuartTrio

from crew import __version__
from lead import hypercorn_fix

GRACEFUL_SECONDS = 3.0
BACKLOG = 1024  # hypercorn's 100 reset connections under a burst of 100 clients (bench/sends.py)
# Longer than clients keep idle connections (httpx: 5 s, browsers: ~60 s), so the client always closes
# first; with hypercorn's 5 s a client could reuse a connection the server was closing at that instant.
KEEP_ALIVE_SECONDS = 75.0


def create_app(install=None) -> QuartTrio:
    """The lead's app; `install(app)` adds the API routes (the daemon passes them in)."""
    app = QuartTrio("collie")
    app.config["MAX_CONTENT_LENGTH"] = 256 * 1024
    if install is not None:
        install(app)

    @app.get("/healthz")
    async def healthz():
        return {"ok": True, "collie": __version__}

    return app


async def serve_http(
    app: QuartTrio,
    binds: list[str],
    shutdown: trio.Event,
    *,
    certfile: str | None = None,
    keyfile: str | None = None,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    hypercorn_fix.install()
    config = Config()
    config.bind = binds
    config.graceful_timeout = GRACEFUL_SECONDS
    config.backlog = BACKLOG
    config.keep_alive_timeout = KEEP_ALIVE_SECONDS
    config.accesslog = None
    config.errorlog = None
    if certfile:
        config.certfile, config.keyfile = certfile, keyfile
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(partial(serve, app, config, shutdown_trigger=shutdown.wait))
        task_status.started(bound)

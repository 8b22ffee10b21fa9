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
    config.accesslog = None
    config.errorlog = None
    if certfile:
        config.certfile, config.keyfile = certfile, keyfile
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(partial(serve, app, config, shutdown_trigger=shutdown.wait))
        task_status.started(bound)

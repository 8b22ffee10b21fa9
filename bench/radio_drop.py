"""How long the lead keeps a connection whose phone's radio dropped (issue 11, W5).

    sudo unshare -n .venv/bin/python bench/radio_drop.py channel   # a live channel viewing an agent
    sudo unshare -n .venv/bin/python bench/radio_drop.py idle      # a kept-alive connection, nothing sent

Real time, in a private network namespace (root: `unshare -n`; the machine's own network is untouched).
The lead's HTTP server (`serve_http`, the live channel installed) and a client talk over the namespace's
loopback; then `ip link set lo down` drops every packet both ways, as a radio that is gone does — no FIN,
no RST. Prints how long after the drop the lead ended the connection: for `channel`, when the channel's
viewing dropped (the agent leaves 2 s polling); for `idle`, when the server stopped counting the
connection. Gives up at 180 s. Loopback has no round trip to speak of: the figure is the kernel's and
the lead's timers (heartbeat 15 s + TCP_USER_TIMEOUT 30 s; keep-alive 30 s + probes), not a latency.
"""

from __future__ import annotations

import subprocess
import sys
import time

import trio

from collie.lead.feed.events import Feed
from collie.lead.routes.events import install_events
from collie.lead.door.http import create_app, serve_http

GIVE_UP = 180.0


async def main(mode: str) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    viewing: list = []

    async def set_viewing(machine, agent, on):
        viewing.append((time.monotonic(), agent, on))

    class Bridge:
        readers: dict = {}
        on_agent_change: list = []

    feed = Feed(Bridge(), set_viewing=set_viewing)
    app = create_app(lambda a: install_events(a, feed, owner_check=lambda: True))
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve_http, app, ["127.0.0.1:0"], shutdown)
        stream = await trio.open_tcp_stream("127.0.0.1", int(binds[0].rsplit(":", 1)[1]))
        path = b"/api/events?agent=desk" if mode == "channel" else b"/healthz"
        await stream.send_all(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        await stream.receive_some(65536)
        await trio.sleep(1)
        subprocess.run(["ip", "link", "set", "lo", "down"], check=True)
        t0 = time.monotonic()
        connections = app.config["COLLIE_CONNECTIONS"]
        while time.monotonic() - t0 < GIVE_UP:
            await trio.sleep(0.5)
            if (len(viewing) >= 2) if mode == "channel" else connections.statistics()["open"] == 0:
                print(f"{mode}: the lead ended the connection {time.monotonic() - t0:.1f} s after the drop")
                break
        else:
            print(f"{mode}: still open {GIVE_UP:.0f} s after the drop")
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        shutdown.set()
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("channel", "idle"):
        sys.exit("usage: unshare -n python bench/radio_drop.py channel|idle")
    trio.run(main, sys.argv[1])

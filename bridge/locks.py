"""One lock per session (features B7, crew.md §3), shared by every write to a conversation.

`hold(key, stop=False)`: a write while another holds the lock is refused at once (`Busy`); a Stop
waits up to `STOP_WAIT` seconds for it and then goes through anyway, so a hung send never locks
Stop out. Used by the bridge's writer (local agents) and by the lead for members' agents.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

import trio

STOP_WAIT = 10.0


class Busy(Exception):
    pass


class SessionLocks:
    def __init__(self) -> None:
        self._locks: dict[tuple, trio.Lock] = {}
        self.stop_wait = STOP_WAIT

    def _lock(self, key: tuple) -> trio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = trio.Lock()
        return lock

    def locked(self, key: tuple) -> bool:
        return self._lock(key).locked()

    @asynccontextmanager
    async def hold(self, key: tuple, *, stop: bool = False):
        """Yields True when the lock is held, False when a Stop went through without it."""
        lock = self._lock(key)
        held = False
        if stop:
            with trio.move_on_after(self.stop_wait):
                await lock.acquire()
                held = True
        elif lock.locked():
            raise Busy()
        else:
            lock.acquire_nowait()
            held = True
        try:
            yield held
        finally:
            if held:
                lock.release()

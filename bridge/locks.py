"""One lock per session (features B7, crew.md §3), shared by every write to a conversation.

`hold(key, stop=False)`: a write while another holds the lock is refused at once (`Busy`); a Stop
waits up to `STOP_WAIT` seconds for it and then goes through anyway, so a hung send never locks
Stop out. The lock is held until the agent answered the write (or its deadline passed).

`on_release`: callables told the key of each lock let go (the lead's inbox dispatches a send that waited
for it, crew.md §3).

Used by the bridge's writer (local agents), by the lead for members' agents, and by a member's
writer under the lead's lock (`wait=0`: a Stop the lead already let through does not wait again).
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
        self.on_release: list = []

    def _lock(self, key: tuple) -> trio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = trio.Lock()
        return lock

    def locked(self, key: tuple) -> bool:
        lock = self._locks.get(key)
        return lock is not None and lock.locked()

    @asynccontextmanager
    async def hold(self, key: tuple, *, stop: bool = False, wait: float | None = None):
        """Yields True when the lock is held, False when a Stop went through without it.
        `wait`: how long a Stop waits (default `stop_wait`)."""
        lock = self._lock(key)
        held = False
        if not lock.locked():
            lock.acquire_nowait()
            held = True
        elif not stop:
            raise Busy()
        else:
            with trio.move_on_after(self.stop_wait if wait is None else wait):
                await lock.acquire()
                held = True
        try:
            yield held
        finally:
            if held:
                lock.release()
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._locks.pop(key, None)
            if held:
                for fn in self.on_release:
                    fn(key)

"""When the next read of one agent may start: a plain class, fed `now` (no I/O, no trio).

The rule (features W5; issue 16.1) — coalesce on the leading edge:
- A change after a quiet spell is read at once: a read may start as soon as the previous one
  *started* at least `gap` ago. Only a burst of changes (an agent streaming a reply) is paced, one
  read per `gap`, so it is read a few times a second rather than once per word.
- A poke reads at once, burst or not: a write just went through (`poke`), or someone waits for a
  turn to end (`poke(eager=True)`, what `Bridge.read_soon` does). Pokes made before that read starts
  coalesce into it; a poke made while a read is in flight asks for one more read right after it,
  because the read in flight may predate what the poker knows.
- Without `watch` (plain polling) the next read comes a `cadence` after the last one started (10 s,
  2 s while viewed) — except while someone waits for a change (`eager`): then every `gap` until a
  read sees one.
- With `watch`, a long-poll answered `304` counts as a plain poll (`not_modified`): the agent holds it
  "up to" `wait` seconds (wire §3), and one that answers at once must not be read five times a second.
  An agent that held it the whole `wait` is read again at once, as that is past the cadence.
"""

from __future__ import annotations

MIN_GAP = 0.2


class ReadPace:
    def __init__(self, gap: float = MIN_GAP) -> None:
        self.gap = gap
        self.last_start: float | None = None
        self.poked = False
        self.eager = False
        self.eager_pokes = 0  # eager pokes so far, and how many of them the read in flight covers
        self.covered = 0
        self.unchanged = False  # the last read answered 304: wait a cadence, long-poll or not

    def poke(self, *, eager: bool = False) -> None:
        self.poked = True
        if eager:
            self.eager = True
            self.eager_pokes += 1

    def started(self, now: float) -> None:
        """A read starts now: every poke made so far is covered by it."""
        self.last_start = now
        self.poked = False
        self.covered = self.eager_pokes

    def finished(self, changed: bool) -> None:
        # The change someone waited for has been read — unless they asked while this read was in
        # flight: what it saw may be an older change (the turn starting, not the end they wait for).
        if changed and self.covered == self.eager_pokes:
            self.eager = False
        self.unchanged = False

    def not_modified(self) -> None:
        """The long-poll that just finished answered 304 (after `finished`)."""
        self.unchanged = True

    def delay(self, now: float, *, long_poll: bool, cadence: float) -> float:
        """Seconds to wait before the next read (0: at once); a poke in the meantime cuts it short."""
        if self.poked:
            return 0.0
        since = now - self.last_start if self.last_start is not None else float("inf")
        every = self.gap if ((long_poll and not self.unchanged) or self.eager) else cadence
        return max(0.0, every - since)

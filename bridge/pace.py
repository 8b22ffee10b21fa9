"""When the next read of one agent may start: a plain class, fed `now` (no I/O, no trio).

The rule (features W5; issues 16.1, 29) — coalesce sustained bursts only, never a short one:
- Reading changes (a long-poll that saw one) spends credit from a small bucket: `BURST` reads may
  start back to back, and credit comes back at one read per `gap` (`MIN_GAP`, 0.2 s; `VIEWED_GAP`,
  0.05 s, while a phone views the agent). So a change after a quiet spell is read at once, and so is
  the change that follows a short one (an agent streams a few words, then asks: both at once, not the
  ask 0.2 s later); only a sustained burst (a long reply streaming) is paced, one read per `gap` —
  a few times a second, not once per word; while viewed, as often as a phone can see (20 a second).
- A poke reads at once, burst or not: a write just went through (`poke`), or someone waits for a
  turn to end (`poke(eager=True)`, what `Bridge.read_soon` does). Pokes made before that read starts
  coalesce into it; a poke made while a read is in flight asks for one more read right after it,
  because the read in flight may predate what the poker knows.
- Without `watch` (plain polling) the next read comes a `cadence` after the last one started (10 s,
  2 s while viewed) — except while someone waits for a change (`eager`): then every `gap` until a
  read sees one (blind polls spend no credit: they are paced by the gap alone).
- With `watch`, a long-poll answered `304` counts as a plain poll (`not_modified`): the agent holds it
  "up to" `wait` seconds (wire §3), and one that answers at once must not be read five times a second.
  An agent that held it the whole `wait` is read again at once, as that is past the cadence.
"""

from __future__ import annotations

MIN_GAP = 0.2  # one read per this gap in a sustained burst of changes
VIEWED_GAP = 0.05  # the same while a phone views the agent: each update of a reply streaming at 20/s is read
BURST = 3  # reads of changes that may start back to back before the gap paces them


class ReadPace:
    def __init__(self, gap: float = MIN_GAP, burst: int = BURST) -> None:
        self.gap = gap
        self.blind_gap = gap  # eager polling without `watch`: the same whether viewed or not
        self.burst = burst
        self.credit = float(burst)  # reads that may start at once, as of `stamp`
        self.stamp: float | None = None
        self.last_start: float | None = None
        self.poked = False
        self.eager = False
        self.eager_pokes = 0  # eager pokes so far, and how many of them the read in flight covers
        self.covered = 0
        self.unchanged = False  # the last read answered 304: wait a cadence, long-poll or not

    def _credit(self, now: float) -> float:
        if self.stamp is None:
            return float(self.burst)
        return min(float(self.burst), self.credit + max(0.0, now - self.stamp) / self.gap)

    def set_gap(self, gap: float, now: float) -> None:
        """Credit comes back at one read per `gap` from `now` on (viewing started or stopped)."""
        self.credit, self.stamp = self._credit(now), now
        self.gap = gap

    def poke(self, *, eager: bool = False) -> None:
        self.poked = True
        if eager:
            self.eager = True
            self.eager_pokes += 1

    def started(self, now: float) -> None:
        """A read starts now: every poke made so far is covered by it; it spends one read of credit."""
        self.credit, self.stamp = max(0.0, self._credit(now) - 1.0), now
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
        if long_poll and not self.unchanged:
            credit = self._credit(now)
            return 0.0 if credit >= 1.0 else (1.0 - credit) * self.gap
        since = now - self.last_start if self.last_start is not None else float("inf")
        every = self.blind_gap if self.eager else cadence
        return max(0.0, every - since)

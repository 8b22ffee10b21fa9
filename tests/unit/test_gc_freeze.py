"""Garbage-collector pauses after start-up (issue 16): what start-up made is frozen, so a full
collection — which holds the event loop — walks only what was made since."""

from __future__ import annotations

import gc

from collie.bridge.daemon import freeze_startup_heap


def test_start_up_objects_leave_the_collectors_generations():
    """Every container alive at the end of start-up moves to the permanent generation; a full
    collection afterwards looks at none of them (bench/inbox.py burst: the longest collection on the
    loop went from 45-107 ms to 10-13 ms)."""
    made_at_start_up = [[i] for i in range(1000)]  # lists: always tracked by the collector
    try:
        freeze_startup_heap()
        tracked = {id(o) for o in gc.get_objects()}
        assert not any(id(o) in tracked for o in made_at_start_up)
        assert gc.get_freeze_count() >= len(made_at_start_up)
    finally:
        gc.unfreeze()

"""The `endless` fixture floods at the rate it is given, low rates included (issue 36, docs/fixtures.md):
on virtual time, with a stand-in for the SDK that records when each item was added."""

from __future__ import annotations

import argparse

import pytest
import trio

from collie.fixtures.agents import endless, main


class Stand:
    """Just enough of `open_collie`'s object for `endless`: each reply is recorded with its virtual time."""

    address = "stand-in"

    def __init__(self) -> None:
        self.times: list[float] = []

    def workspace(self, *_a, **_k):
        return self

    def tab(self, *_a, **_k):
        return self

    def pane(self, *_a, **_k):
        return self

    def reply(self, _text: str) -> None:
        self.times.append(trio.current_time())

    def ready(self) -> None:
        pass


async def flood(rate: float, seconds: float) -> list[float]:
    stand = Stand()
    args = argparse.Namespace(conversations=1, size=10, rate=rate, ask=False, asks=False)
    start = trio.current_time()
    with trio.move_on_after(seconds + 0.005):
        await endless(stand, args)
    return [round(t - start, 6) for t in stand.times]


@pytest.mark.parametrize(("rate", "count", "gap"), [(5, 51, 0.2), (0.5, 6, 2.0), (40, 401, 0.025)])
async def test_a_rate_below_100_a_second_is_honoured(autojump_clock, rate, count, gap):
    """`--rate 5` adds one item every 200 ms (51 in 10 s, the first at once), `--rate 0.5` one every 2 s,
    `--rate 40` one every 25 ms — before, any rate below 100 gave 100 a second."""
    times = await flood(rate, 10.0)
    assert len(times) == count
    assert times == [round(i * gap, 6) for i in range(count)]


async def test_a_high_rate_goes_in_batches_every_10_ms(autojump_clock):
    """`--rate 2000`: 20 items each 10 ms, 20,001 in 10 s (rate × t, never more)."""
    times = await flood(2000, 10.0)
    assert len(times) == 20_001
    assert times[:21] == [0.0] + [0.01] * 20


@pytest.mark.parametrize("rate", ["0", "-3", "nan", "inf"])
def test_a_rate_that_is_not_a_rate_is_refused(rate, capsys):
    with pytest.raises(SystemExit) as done:
        main(["endless", "--socket", "/tmp/unused.sock", "--rate", rate])
    assert done.value.code == 2
    assert "is not a rate: give items a second, more than 0 and at most 1000000" in capsys.readouterr().err

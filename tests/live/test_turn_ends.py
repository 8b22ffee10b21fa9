"""When a turn ends (issue 37; crew.md §5; docs/push.md): which turns ended, what their push says, and the
limits — asks keep the whole P1 budget, turn ends use what is left and past it fold into one
`N turns ended on <agent>` push a minute per agent. Exact virtual times on trio's autojump clock."""

from __future__ import annotations

import trio

from collie.lead.push.pusher import PushLimiter
from collie.lead.push.turn_ends import Ended, Look, Push, Seen, Tick, TurnEnds, turn_payload, turn_text


def seen(*convs, machine="local", agent="desk") -> Seen:
    return Seen(machine, agent, tuple(convs))


def ended(conv: str, devices=("p1",), machine="local", agent="desk", turn=1) -> Ended:
    payload = turn_payload(machine=machine, agent=agent, conversation=conv, turn=turn, pane=conv.title(), how="done",
                           line="ok", redact_on=True)
    return Ended(machine, agent, conv, payload, frozenset(devices))


def test_a_turn_ends_when_a_running_conversation_is_next_seen_idle():
    """A conversation seen working (or waiting on an ask) and then idle ended that turn, once; one seen for the
    first time ends nothing (the lead did not see it run), nor does one that closes; a whole turn run between two
    reads (idle at a later turn) ended too."""
    t = TurnEnds(PushLimiter())
    assert t.handle(seen(("a", "idle", 3, 40), ("b", "working", 1, 9)), 0.0) == []  # first sight: nothing
    assert t.handle(seen(("a", "working", 4, 41), ("b", "waiting", 1, 12)), 1.0) == []
    assert t.handle(seen(("a", "idle", 4, 50), ("b", "working", 1, 13)), 2.0) == [Look("local", "desk", "a", 4, 40)]
    assert t.handle(seen(("a", "idle", 4, 50), ("b", "idle", 1, 20)), 3.0) == [Look("local", "desk", "b", 1, 0)]
    assert t.handle(seen(("a", "idle", 4, 50), ("b", "idle", 1, 20)), 4.0) == []  # still idle: nothing more
    assert t.handle(seen(("a", "idle", 5, 60), ("b", "idle", 1, 20)), 5.0) == [Look("local", "desk", "a", 5, 50)]
    assert t.handle(seen(("b", "working", 2, 21)), 6.0) == []  # `a` closed
    assert t.handle(seen(("a", "idle", 6, 70), ("b", "working", 2, 21)), 7.0) == []  # reopened: first sight again
    # another agent's, or another machine's, conversation of the same id is its own
    assert t.handle(seen(("b", "idle", 2, 30), machine="workshop"), 8.0) == []


def test_the_push_says_done_with_the_first_line_of_the_last_reply_masked_and_cut():
    """`Done in <pane>` + the first line of the turn's last reply; masked whole (X1) and cut to 120."""
    items = [{"seq": 1, "turn": 1, "kind": "user", "text": "hi"}, {"seq": 2, "turn": 1, "kind": "reply", "text": "old"},
             {"seq": 3, "turn": 2, "kind": "user", "text": "run the tests"},
             {"seq": 4, "turn": 2, "kind": "reply", "text": "thinking aloud"},
             {"seq": 5, "turn": 2, "kind": "tool", "status": "completed"},
             {"seq": 6, "turn": 2, "kind": "reply", "text": "\nAll 40 tests pass. token=ghp_" + "a" * 36 + " " + "x" * 200
              + "\nsecond line"},
             {"seq": 7, "turn": 2, "kind": "turn_end", "stopped": False}]
    how, line = turn_text(items, 2, None)
    assert (how, line.startswith("All 40 tests pass.")) == ("done", True) and "second" not in line
    p = turn_payload(machine="local", agent="desk", conversation="c 1", turn=2, pane="Fix the build", how=how,
                     line=line, redact_on=True)
    assert p["title"] == "Done in Fix the build" and p["body"].startswith("All 40 tests pass. token=[secret] xx")
    assert len(p["body"]) == 120 and p["body"].endswith("…") and "ghp_" not in p["body"]
    assert (p["url"], p["tag"]) == ("/#/c/local/desk/c%201", "turn:local/desk/c 1")
    plain = turn_payload(machine="local", agent="desk", conversation="c", turn=2, pane=None, how=how, line=line,
                         redact_on=False)
    assert "ghp_" in plain["body"] and plain["title"] == "Done in Untitled conversation"


def test_stopped_and_failed_say_why():
    """`Stopped in` when the turn_end says stopped — by whom, as far as the lead knows — and `Failed in` with the
    agent's own notice when the turn's last word is one."""
    stopped = [{"seq": 1, "turn": 1, "kind": "reply", "text": "half"}, {"seq": 2, "turn": 1, "kind": "turn_end", "stopped": True}]
    assert turn_text(stopped, 1, None) == ("stopped", "Stopped in the agent.")
    assert turn_text(stopped, 1, "p2") == ("stopped", "Stop was tapped on another phone.")
    assert turn_text(stopped, 1, "") == ("stopped", "Stopped through Collie's API.")
    failed = [{"seq": 1, "turn": 1, "kind": "reply", "text": "trying"},
              {"seq": 2, "turn": 1, "kind": "notice", "text": "The agent answered the prompt with an error: boom\nmore"},
              {"seq": 3, "turn": 1, "kind": "turn_end", "stopped": False}]
    assert turn_text(failed, 1, None) == ("failed", "The agent answered the prompt with an error: boom")
    assert turn_text([], 1, None) == ("done", None)


async def test_asks_keep_the_whole_budget_and_twelve_turns_fold_into_one_push_a_minute(autojump_clock):
    """P1 with turn ends: twelve turns ending at once on one agent (twelve conversations) push while all pushes
    stay within 10 a minute — fewer when asks took some — the rest fold into one `N turns ended on desk` push
    60 s after the first folded, and an ask in the same minute still pushes: turn ends never take its place."""
    asks = PushLimiter()
    t = TurnEnds(asks)
    t0 = trio.current_time()
    assert asks.admit("local", "desk", "c0", t0) == "push"  # an ask first: turn ends get what is left (9)
    got = [t.handle(ended(f"c{i}"), t0) for i in range(12)]
    assert sum(1 for g in got if g) == 9 and all(g == [] for g in got[9:])
    assert t.next_due() == t0 + 60
    await trio.sleep(1)
    now = trio.current_time()
    assert [asks.admit("local", "desk", f"k{i}", now) for i in range(10)] == ["push"] * 9 + ["quiet"]  # asks: all theirs
    assert t.handle(ended("c99"), now) == []  # a fold waits: this one joins it
    assert t.handle(Tick(), now) == []
    await trio.sleep(59)
    assert trio.current_time() - t0 == 60
    [fold] = t.handle(Tick(), trio.current_time())
    assert fold == Push(frozenset({"p1"}), {"kind": "turns", "title": "4 turns ended on desk", "body": None,
                                             "tag": "turns:local/desk", "url": "/#/a/local/desk"})
    assert t.next_due() is None and t.handle(Tick(), trio.current_time()) == []


async def test_a_fold_counts_for_each_phone_and_goes_at_most_once_a_minute(autojump_clock):
    """N is each phone's own count; a fold push is one of the agent's pushes (it uses what is left too), and the
    next fold of that agent comes a minute after the turn end that started it — never two in one minute."""
    t = TurnEnds(PushLimiter())
    t0 = trio.current_time()
    for i in range(3):  # one pane: 3 a minute
        assert t.handle(ended("a", turn=i), t0)
    assert t.handle(ended("a", devices=("p1", "p2")), t0) == []
    assert t.handle(ended("a", devices=("p2",)), t0) == []
    await trio.sleep(60)
    folds = t.handle(Tick(), trio.current_time())
    assert {(p.payload["title"], p.devices) for p in folds} == {("1 turns ended on desk", frozenset({"p1"})),
                                                                 ("2 turns ended on desk", frozenset({"p2"}))}
    await trio.sleep(1)  # the pane's minute passed: turn ends push again
    assert t.handle(ended("a"), trio.current_time())


async def test_turn_ends_for_nobody_count_nothing_and_a_silenced_agent_folds(autojump_clock):
    """A turn end no phone is to get is no push and uses no budget; while the agent is silenced for raising many
    asks (P1's hour), its turn ends fold."""
    asks = PushLimiter()
    t = TurnEnds(asks)
    t0 = trio.current_time()
    for i in range(20):
        assert t.handle(ended(f"c{i}", devices=()), t0) == []
    assert t.handle(ended("x"), t0)  # nothing was used
    asks.silent[("local", "desk")] = t0 + 3600
    assert t.handle(ended("y"), t0) == [] and t.next_due() == t0 + 60
    for minute in range(1, 60):  # the silence holds the fold too: it waits a minute at a time, gathering
        await trio.sleep(60)
        assert t.handle(Tick(), trio.current_time()) == [] and t.next_due() == t0 + 60 * (minute + 1)
        t.handle(ended("y"), trio.current_time())
    await trio.sleep(60)
    assert trio.current_time() - t0 == 3600
    [fold] = t.handle(Tick(), trio.current_time())
    assert fold.payload["title"] == "60 turns ended on desk"


async def test_a_fold_waits_while_the_hour_is_spent(autojump_clock):
    """30 pushes in an hour per agent count folds too: with the hour spent by asks and turn ends, a fold waits a
    minute at a time until the oldest push leaves the hour."""
    asks = PushLimiter()
    t = TurnEnds(asks)
    t0 = trio.current_time()
    for i in range(3):  # 10 a minute: three minutes of pushes, 30 in all
        now = trio.current_time()
        assert [asks.admit("local", "desk", f"k{i}-{j}", now) for j in range(5)] == ["push"] * 5
        assert all(t.handle(ended(f"c{i}-{j}"), now) for j in range(5))
        await trio.sleep(60)
    assert t.handle(ended("late"), trio.current_time()) == []  # t0 + 180: the hour is spent
    due = t0 + 240
    while due < t0 + 3600:
        await trio.sleep_until(due)
        assert t.handle(Tick(), trio.current_time()) == [] and t.next_due() == due + 60
        due += 60
    await trio.sleep_until(t0 + 3600)  # the first minute's ten pushes leave the hour
    [fold] = t.handle(Tick(), trio.current_time())
    assert fold.payload["title"] == "1 turns ended on desk"


async def test_the_windows_and_a_waiting_fold_survive_a_restart(autojump_clock):
    """The lead restarts: what was sent in the last minute and hour, and a fold waiting, are as before."""
    asks = PushLimiter()
    t = TurnEnds(asks)
    t0 = trio.current_time()
    for i in range(11):
        t.handle(ended(f"c{i}"), t0)
    again = TurnEnds(asks, t.state(t0))
    assert again.next_due() == t0 + 60 and again.handle(ended("z"), t0) == []
    await trio.sleep(60)
    [fold] = again.handle(Tick(), trio.current_time())
    assert fold.payload["title"] == "2 turns ended on desk"

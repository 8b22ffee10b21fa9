"""ACP file requests stay inside --cwd while a hostile agent changes the folder under them (issue 25.3;
docs/acp.md "Files and terminals"), on the real filesystem.

- A folder flipped between a real folder and a symlink to elsewhere, as fast as a thread can, while
  the adapter reads and writes through it: never one byte from outside, never a file written outside.
- A file with more than one hard link is not written (its other name may be outside); the agent is told.
- Through the real adapter: the refusal reaches the agent as the request's error.
"""

from __future__ import annotations

import os
import sys
import threading

import pytest

from collie.crew.acp import files


def race(root, outside, fn, rounds: int = 3000) -> list:
    """Run `fn()` `rounds` times while `root/d` flips; the results (or the Refused messages)."""
    (root / "d.real").mkdir()
    (root / "d.real" / "f").write_text("inside")
    stop = threading.Event()

    def flip():
        d, real, sym = root / "d", root / "d.real", root / "d.sym"
        os.symlink(outside, sym)
        while not stop.is_set():
            os.rename(real, d)  # d: the real folder
            os.rename(d, real)
            os.rename(sym, d)   # d: a symlink out
            os.rename(d, sym)

    t = threading.Thread(target=flip, daemon=True)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the threads take turns within a request, not between requests
    t.start()
    out = []
    try:
        for _ in range(rounds):
            try:
                out.append(fn())
            except files.Refused as exc:
                out.append(exc)
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(interval)
    return out


@pytest.fixture
def tree(tmp_path):
    root, outside = tmp_path / "work", tmp_path / "outside"
    root.mkdir(), outside.mkdir()
    (outside / "f").write_text("SECRET")
    return root, outside


def test_a_folder_swapped_for_a_symlink_mid_request_never_lets_a_read_out(tree):
    root, outside = tree
    got = race(root, outside, lambda: files.read_text(root, str(root / "d" / "f")))
    assert "SECRET" not in got
    assert "inside" in got  # the race ran: the folder was there often enough to be read


def test_a_folder_swapped_for_a_symlink_mid_request_never_lets_a_write_out(tree):
    root, outside = tree
    race(root, outside, lambda: files.write_text(root, str(root / "d" / "new"), "planted"))
    assert sorted(p.name for p in outside.iterdir()) == ["f"]
    assert (outside / "f").read_text() == "SECRET"


def test_a_file_with_another_hard_link_is_not_written(tree):
    root, outside = tree
    os.link(outside / "f", root / "hard")
    with pytest.raises(files.Refused, match="2 hard links"):
        files.write_text(root, str(root / "hard"), "overwritten")
    assert (outside / "f").read_text() == "SECRET" and (root / "hard").read_text() == "SECRET"
    files.write_text(root, str(root / "own"), "one link")  # a file of one link is written as before
    files.write_text(root, str(root / "own"), "again")
    assert (root / "own").read_text() == "again"


def test_links_inside_are_followed_and_links_out_refused(tree):
    root, outside = tree
    (root / "sub").mkdir()
    (root / "sub" / "a.txt").write_text("A")
    (root / "rel").symlink_to("sub/a.txt")
    (root / "abs").symlink_to(root / "sub" / "a.txt")
    (root / "up").symlink_to("../outside/f")
    (root / "sub" / "loop").symlink_to("loop")
    (root / "fifo").parent.mkdir(exist_ok=True)
    os.mkfifo(root / "fifo")
    assert files.read_text(root, str(root / "rel")) == "A" and files.read_text(root, str(root / "abs")) == "A"
    assert files.read_text(root, str(root / "sub" / ".." / "sub" / "a.txt")) == "A"
    for bad, says in ((root / "up", "outside"), (root / "sub" / "loop", "symlinks"), (root / "fifo", "not a regular"),
                      (root / "sub", "folder"), (root / "nope", "does not exist")):
        with pytest.raises(files.Refused, match=says):
            files.read_text(root, str(bad))
    files.write_text(root, str(root / "rel"), "B")  # through a symlink inside: its target is written
    assert (root / "sub" / "a.txt").read_text() == "B" and (root / "rel").is_symlink()


def _unblocked_write(root, path: str, content: str, fifo) -> None:
    """`files.write_text` in a thread, bounded: if it is still blocked after 20 s (an open of a FIFO
    with no reader), the FIFO is opened for reading so the thread ends, and the test fails."""
    done: list = []
    t = threading.Thread(target=lambda: done.append(files.write_text(root, path, content)), daemon=True)
    t.start()
    t.join(20)
    if t.is_alive():
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        t.join(20)
        os.close(fd)
        pytest.fail("the write blocked on a FIFO the agent planted")
    assert done == [None]


def test_a_hard_link_planted_at_the_temporary_name_is_never_written_through(tree):
    """Issue 42 item 1: the agent plants `<cwd>/.innocent.txt.collie-tmp` as a hard link to a file
    outside (the name the adapter used to write through, opened with truncate); a write of
    `innocent.txt` writes a new file of its own and leaves the outside file as it was."""
    root, outside = tree
    os.link(outside / "f", root / ".innocent.txt.collie-tmp")
    files.write_text(root, str(root / "innocent.txt"), "the agent's text")
    assert (outside / "f").read_text() == "SECRET"
    assert (root / "innocent.txt").read_text() == "the agent's text"
    assert os.stat(root / "innocent.txt").st_nlink == 1
    assert sorted(p.name for p in root.iterdir()) == [".innocent.txt.collie-tmp", "innocent.txt"]  # nothing left


def test_a_fifo_planted_at_the_temporary_name_does_not_block_the_write(tree):
    """Issue 42 item 5: a FIFO at the adapter's old temporary name (an open for writing blocks until a
    reader comes) is never opened: the write ends at once and the file is written."""
    root, _ = tree
    os.mkfifo(root / ".innocent.txt.collie-tmp")
    _unblocked_write(root, str(root / "innocent.txt"), "written", root / ".innocent.txt.collie-tmp")
    assert (root / "innocent.txt").read_text() == "written"


def test_the_temporary_name_cannot_be_known_beforehand(tree, monkeypatch):
    """Issue 42 item 1: each write draws a fresh random temporary name, created exclusively; a name
    already taken (whatever it is) is passed over for another, never opened."""
    root, outside = tree
    names = iter(["taken", "taken", "free"])
    monkeypatch.setattr(files.secrets, "token_hex", lambda n: next(names))
    os.link(outside / "f", root / ".collie-write-taken.tmp")
    files.write_text(root, str(root / "a.txt"), "A")
    assert (root / "a.txt").read_text() == "A" and (outside / "f").read_text() == "SECRET"
    assert sorted(p.name for p in root.iterdir()) == [".collie-write-taken.tmp", "a.txt"]


def test_text_that_is_not_unicode_is_refused_not_raised(tree):
    """Issue 42 item 2: content with a lone surrogate (JSON allows `\\ud800`) is refused with a
    reason, not a crash; nothing is written."""
    root, _ = tree
    with pytest.raises(files.Refused, match="not valid Unicode"):
        files.write_text(root, str(root / "s.txt"), "x\ud800")
    assert not (root / "s.txt").exists()


async def test_a_file_request_that_blocks_does_not_hold_the_adapter(tree, monkeypatch):
    """Issue 42 item 5: fs/* requests run off the adapter's event loop and are bounded in time: while
    a write is stuck (a hung mount, say), a read is answered, and the stuck write is refused with a
    reason once `FILE_TIMEOUT` is up — the adapter never waits on a file."""
    import trio

    from collie.crew.acp import adapter as adapter_mod
    from collie.crew.acp.rpc import RpcError

    root, _ = tree
    (root / "hello.txt").write_text("hello")
    a = adapter_mod.Adapter(["true"], name="t", cwd=str(root), state_dir=root.parent / "st", log=lambda _: None)
    a.sessions.set("c", "s", str(root))
    a.live_sessions.add("s")
    stuck = threading.Event()
    monkeypatch.setattr(files, "write_text", lambda *args: stuck.wait())
    monkeypatch.setattr(adapter_mod, "FILE_TIMEOUT", 3.0, raising=False)
    watchdog = threading.Timer(20, stuck.set)  # were the write on the loop, the test would end, failing
    watchdog.start()
    write = {"sessionId": "s", "path": str(root / "w.txt"), "content": "x"}
    got: list = []

    async def writing():
        with pytest.raises(RpcError, match="did not answer within 3 s") as exc:
            await a.handle("fs/write_text_file", write, False)
        got.append((exc.value.code, stuck.is_set()))  # refused while the write still hangs

    try:
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(writing)
                read = await a.handle("fs/read_text_file", {"sessionId": "s", "path": str(root / "hello.txt")}, False)
                assert read == {"content": "hello"}  # answered while the write hangs
        assert got == [(-32602, False)]
    finally:
        stuck.set()
        watchdog.cancel()


async def test_a_flood_of_requests_is_bounded(monkeypatch):
    """Issue 42 (hostile agents' answers bounded): the agent's requests handled at once are at most
    `REQUESTS_MAX`; one more is refused at once with the reason (not a new task each, without end),
    and those in flight are answered as they finish."""
    import trio
    import trio.testing

    from collie.crew.acp import rpc
    from collie.crew.acp.framing import Decoder, encode

    monkeypatch.setattr(rpc, "REQUESTS_MAX", 4, raising=False)
    ours, theirs = trio.testing.memory_stream_pair()
    release = trio.Event()
    running = []

    async def handler(method, params, is_notification):
        running.append(params["n"])
        await release.wait()
        return {"n": params["n"]}

    logs: list[str] = []
    ep = rpc.Endpoint(ours, ours, handler, log=logs.append)
    decoder, got = Decoder(), []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(ep.serve)
            await theirs.send_all(b"".join(encode({"jsonrpc": "2.0", "id": n, "method": "slow", "params": {"n": n}})
                                           for n in range(10)))
            while len(got) < 6:
                got += [e.body for e in decoder.feed(await theirs.receive_some(65536))]
            assert sorted(running) == [0, 1, 2, 3]
            assert sorted(m["id"] for m in got) == [4, 5, 6, 7, 8, 9]
            assert all("at most 4 requests at once" in m["error"]["message"] for m in got)
            release.set()
            got = []
            while len(got) < 4:
                got += [e.body for e in decoder.feed(await theirs.receive_some(65536))]
            assert sorted(m["result"]["n"] for m in got) == [0, 1, 2, 3]
            nursery.cancel_scope.cancel()
    assert sum("requests open: further ones are refused" in line for line in logs) == 1

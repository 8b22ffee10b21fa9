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

from crew.acp import files


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

"""The tests' own layers (docs/architecture.md, "The tests, in three layers"): tests/unit is pure, tests/live
runs in one process, every test file sits in a layer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# What a test file of a layer may not import, and the fixtures and helpers that start a program, which only
# tests/system may use.
STARTS_PROGRAMS = {"subprocess", "multiprocessing", "pty", "playwright", "tests.procs", "tests.browser",
                   "tests.phonelab", "tests.demolab", "tests.trustlab", "tests.agents", "tests.pushlab"}
TEST_LAYERS = {
    "unit": STARTS_PROGRAMS | {"socket", "ssl", "trio", "httpx", "threading", "tests.livelab", "tests.apilab"},
    "live": STARTS_PROGRAMS,
}
PROGRAM_NAMES = {"run_collie", "BridgeProcess", "Crew", "DemoRun"}  # helpers that start a program
PROGRAM_FIXTURES = {"bridge", "browser", "crew"}


def layer_breaks(path: Path, forbidden: set[str], no_async: bool) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name in forbidden or a.name.split(".")[0] in forbidden]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module in forbidden or node.module.split(".")[0] in forbidden:
                found.append(node.module)
            found += [f"{node.module}.{a.name}" for a in node.names
                      if a.name in PROGRAM_NAMES or f"{node.module}.{a.name}" in forbidden]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            found += [f"{node.name}({a.arg})" for a in node.args.args if a.arg in PROGRAM_FIXTURES]
            if no_async and isinstance(node, ast.AsyncFunctionDef):
                found.append(f"async def {node.name}")
    return found


@pytest.mark.parametrize("layer", sorted(TEST_LAYERS))
def test_the_tests_keep_to_their_layer(layer):
    """tests/unit is pure (no process, socket, event loop or browser: the whole layer runs in seconds);
    tests/live runs in one process (trio, real sockets, no program started); every test file sits in a layer."""
    tests = REPO / "tests"
    assert not list(tests.glob("test_*.py")), "a test file outside tests/unit, tests/live, tests/system"
    files = sorted((tests / layer).glob("test_*.py"))
    bad = {p.name: got for p in files if (got := layer_breaks(p, TEST_LAYERS[layer], no_async=layer == "unit"))}
    assert files and bad == {}

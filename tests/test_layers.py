"""Imports flow one way: `lead`, `member` → `bridge` → `crew` (STYLE habit 5)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "crew": {"bridge", "lead", "member", "fixtures"},
    "bridge": {"lead", "member", "fixtures"},
    "member": {"lead", "fixtures"},
    "lead": {"member", "fixtures"},
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_flow_one_way(package):
    bad = {str(p.relative_to(REPO)): sorted(imported_packages(p) & FORBIDDEN[package])
           for p in (REPO / package).rglob("*.py")}
    assert {k: v for k, v in bad.items() if v} == {}

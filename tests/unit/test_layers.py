"""Imports flow one way: `lead`, `member` → `bridge` → `crew` (STYLE habit 5)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
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


def test_the_architecture_page_names_only_code_and_tests_that_exist():
    """docs/architecture.md says, for each guarantee, the place that keeps it and the test that proves
    it: every file and every `tests/…::test_name` it names is there (a renamed test breaks this)."""
    import re

    page = (REPO / "docs" / "architecture.md").read_text()
    files = set(re.findall(r"`((?:tests|bench|lead|bridge|crew|member|fixtures)/[\w/]+\.py)", page))
    assert files and not [f for f in files if not (REPO / f).is_file()]
    named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", page)
    assert named and not [(f, t) for f, t in named if f"def {t}(" not in (REPO / f).read_text()]

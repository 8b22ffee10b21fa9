"""The shape of the code (STYLE habit 5; issue 41): imports flow one way — `lead`, `member` → `bridge` →
`crew` — under the one import name `collie`, with no cycle and no re-export, so each name has one home."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("crew", "bridge", "lead", "member", "fixtures")
FORBIDDEN = {
    "crew": {"bridge", "lead", "member", "fixtures"},
    "bridge": {"lead", "member", "fixtures"},
    "member": {"lead", "fixtures"},
    "lead": {"member", "fixtures"},
}
# public faces for users of the SDK and the testing kit (docs/sdk.md, docs/testing.md): their __init__ names
# what users import; inside Collie every import goes to the name's own module
FACADES = {"collie.crew.sdk", "collie.fixtures.member"}


def modules() -> dict[str, Path]:
    """Every module of Collie by its import name (`collie.lead.inbox.core`) and its file."""
    out = {}
    for folder in FOLDERS:
        for p in (REPO / folder).rglob("*.py"):
            parts = list(p.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(["collie", folder, *parts])] = p
    return out


def code_files() -> list[Path]:
    return [p for d in (*FOLDERS, "tests", "bench", "docs") for p in (REPO / d).rglob("*.py")
            if not {".agents", "node_modules", "__pycache__"} & set(p.parts)]


def runtime_imports(tree: ast.Module):
    """Every import statement that runs (module level or in a function), not those under TYPE_CHECKING."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for b in node.body for n in ast.walk(b)}
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in skip]


def imported_folders(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
        found |= {n.split(".")[1] for n in names if n.startswith("collie.") and n.count(".") >= 1}
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_flow_one_way(package):
    bad = {str(p.relative_to(REPO)): sorted(imported_folders(p) & FORBIDDEN[package])
           for p in (REPO / package).rglob("*.py")}
    assert {k: v for k, v in bad.items() if v} == {}


def test_everything_is_imported_by_its_one_name():
    """No file imports `crew`, `lead`, `fixtures` … by their folder's name: that would load a second copy of
    a module beside `collie.…`'s, with its own classes and its own state."""
    bad = []
    for p in code_files():
        for node in ast.walk(ast.parse(p.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            bad += [f"{p.relative_to(REPO)}:{node.lineno} {n}" for n in names if n.split(".")[0] in FOLDERS]
    assert bad == []


def test_no_import_cycle():
    """No module imports, even from inside a function, one that imports it back (directly or around a loop):
    each rule's home can be read without its callers (type-only imports under TYPE_CHECKING aside)."""
    mods = modules()
    graph = {m: set() for m in mods}
    for m, p in mods.items():
        for node in runtime_imports(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in mods:
                graph[m] |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                             for a in node.names}
            elif isinstance(node, ast.Import):
                graph[m] |= {a.name for a in node.names if a.name in mods}
        graph[m].discard(m)
    # a package's __init__ is not a step of a cycle through its own submodules (importing a.b runs a first)
    cycles, state = [], {}

    def visit(m, path):
        state[m] = "open"
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                cycles.append(path[path.index(n):] + [n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def defined_names(tree: ast.Module) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node in tree.body:
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                out |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            pass
    return out | {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def test_every_name_is_imported_from_its_home():
    """No re-export: `from collie.X import name` names the module that defines `name` (or a submodule of a
    package), so a reader finds a rule where the import says — the SDK's and the testing kit's public faces
    aside, for code outside them."""
    mods = modules()
    homes = {m: defined_names(ast.parse(p.read_text())) for m, p in mods.items()}
    bad = []
    for p in code_files():
        for node in ast.walk(ast.parse(p.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in mods):
                continue
            if node.module in FACADES and not p.is_relative_to(mods[node.module].parent):
                continue
            bad += [f"{p.relative_to(REPO)}:{node.lineno} {node.module}.{a.name}" for a in node.names
                    if a.name not in homes[node.module] and f"{node.module}.{a.name}" not in mods]
    assert bad == []


def test_every_package_is_installed_and_says_its_job():
    """pyproject's package list is every folder of Collie that holds an __init__.py, each installed under
    `collie.`, and each package's __init__ opens with a docstring saying what it is for."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {".".join(["collie", *p.parent.relative_to(REPO).parts]): p for d in FOLDERS
               for p in (REPO / d).rglob("__init__.py")}
    assert sorted(project["packages"]) == sorted(folders)
    assert project["package-dir"] == {f"collie.{d}": d for d in FOLDERS}
    quiet = [n for n, p in folders.items() if not ast.get_docstring(ast.parse(p.read_text()))]
    assert quiet == []


def test_the_architecture_page_names_only_code_and_tests_that_exist():
    """docs/architecture.md says, for each guarantee, the place that keeps it and the test that proves
    it: every file and every `tests/…::test_name` it names is there (a renamed test breaks this)."""
    import re

    page = (REPO / "docs" / "architecture.md").read_text()
    files = set(re.findall(r"`((?:tests|bench|lead|bridge|crew|member|fixtures)/[\w/]+\.py)", page))
    assert files and not [f for f in files if not (REPO / f).is_file()]
    named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", page)
    assert named and not [(f, t) for f, t in named if f"def {t}(" not in (REPO / f).read_text()]

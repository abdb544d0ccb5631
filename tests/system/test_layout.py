"""The layout stays one-way (docs/architecture.md): imports go ``api → sketch → exact``, no module imports itself
back through others, and inside ``api`` the doors (CLI, routes, console, job runner, demo) call the service
and are called by nothing but the application factory and the CLI itself.

Every import counts — at module level and inside functions — read from the source with :mod:`ast` (nothing
is imported to check).  ``from pkg import name`` imports the package ``pkg`` (its ``__init__`` runs), and
the submodule ``pkg.name`` when there is one; ``import a.b.c`` imports module ``a.b.c``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("exact", "sketch", "api", "migrations", "bench")
#: A module may import its own layer and the layers below it.
LAYER = {"exact": 0, "sketch": 1, "api": 2, "migrations": 3, "bench": 4}
#: The doors of the service and the only modules that may import each.
DOORS = {
    "api.routes": {"api.app"},
    "api.console": {"api.app"},
    "api.jobs": {"api.app", "api.cli.serving"},
    "api.demo": {"api.cli.admin"},
    "api.app": {"api.cli.serving"},
    "api.cli": {"api.cli"},  # the package and its submodules: only each other
    "api.server": {"api.cli.serving"},  # the request workers: gunicorn loads them by name
}


def modules(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Dotted module name → source file of every module of ``packages`` under ``root``."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The project modules that module ``name`` (at ``path``) imports, anywhere in its body."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()

    def nearest(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = nearest(alias.name)
                if target:
                    out.add(target)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            target = nearest(source)
            if target:
                out.add(target)
            for alias in node.names:
                if f"{source}.{alias.name}" in known:
                    out.add(f"{source}.{alias.name}")
    out.discard(name)
    return out


def import_graph(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    known = modules(root, packages)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def upward(graph: Mapping[str, set[str]]) -> list[str]:
    """Imports from a lower layer into a higher one, as ``a -> b``."""
    out = []
    for name, targets in sorted(graph.items()):
        for target in sorted(targets):
            if LAYER[target.split(".")[0]] > LAYER[name.split(".")[0]]:
                out.append(f"{name} -> {target}")
    return out


def _door_of(name: str) -> str | None:
    for door in DOORS:
        if name == door or name.startswith(door + "."):
            return door
    return None


def doors_entered(graph: Mapping[str, set[str]]) -> list[str]:
    """Imports of a door by a project module the door does not admit (bench and tests are outside)."""
    out = []
    for name, targets in sorted(graph.items()):
        if name.split(".")[0] == "bench":
            continue
        for target in sorted(targets):
            door = _door_of(target)
            if door is None or _door_of(name) == door:
                continue
            if not any(name == ok or name.startswith(ok + ".") for ok in DOORS[door]):
                out.append(f"{name} -> {target}")
    return out


def test_the_imports_go_one_way() -> None:
    graph = import_graph(REPO)
    assert len(graph) > 50 and "api.routes" in graph["api.app"]
    assert circles(graph) == []
    assert upward(graph) == []
    assert doors_entered(graph) == []


def _plant(root: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize(("files", "circle"), [
    ({"exact/a.py": "def f():\n    from exact.b import g\n", "exact/b.py": "import exact.a\n"},
     ["exact.a", "exact.b"]),
    # a package whose __init__ imports a submodule that takes a name from the package back
    ({"exact/lang/__init__.py": "from exact.lang.parse import p\nX = 1\n",
      "exact/lang/parse.py": "from exact.lang import X\n"}, ["exact.lang", "exact.lang.parse"]),
    ({"sketch/t.py": "from . import u\n", "sketch/u.py": "from .t import x\n"}, ["sketch.t", "sketch.u"]),
])
def test_a_planted_circle_is_found(tmp_path: Path, files: dict[str, str], circle: list[str]) -> None:
    _plant(tmp_path, files)
    graph = import_graph(tmp_path, ("exact", "sketch"))
    assert circles(graph) == [circle]


def test_planted_upward_imports_and_door_entries_are_found(tmp_path: Path) -> None:
    _plant(tmp_path, {"exact/e.py": "def f():\n    import sketch.s\n", "sketch/s.py": "from api import x\n",
                      "api/__init__.py": "x = 1\n", "api/routes.py": "",
                      "api/service.py": "from api import routes\n", "api/app.py": "from api import routes\n"})
    graph = import_graph(tmp_path, ("exact", "sketch", "api"))
    assert upward(graph) == ["exact.e -> sketch.s", "sketch.s -> api"]
    assert doors_entered(graph) == ["api.service -> api.routes"]
    assert circles(graph) == []

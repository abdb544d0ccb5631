"""docs/architecture.md names every module of ``exact/``, ``sketch/`` and ``api/``, and names nothing that is
not there: the map cannot go stale in either direction.

The document has a section per package, headed ``## `exact/` …``; in its tables a module is written as its
path inside the package in backticks (``engine/driver.py``), a subpackage or folder with a trailing slash
(``readers/``), an asset by its file name (``query/language/query.lark``).  Every ``.py`` file of a package
but ``__init__.py`` must be named in its section's tables, and every such path named there must exist.
Backticked words that are not paths (``evaluate_table``, ``stats.index``, ``/v1``) are not read as paths.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
PACKAGES = ("exact", "sketch", "api")
#: Files besides modules the tables may name (the grammar, the web page's files).
ASSETS = (".lark", ".html", ".js", ".css", ".svg", ".json")

_SECTION = re.compile(r"^## `([a-z_]+)/`")
_CODE = re.compile(r"`([^`]+)`")


def named_paths(doc: str, packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    """Package → the paths named in backticks in the table rows of its section."""
    wanted = set(packages)
    found: dict[str, set[str]] = {p: set() for p in wanted}
    current: str | None = None
    for line in doc.splitlines():
        if line.startswith("## "):
            m = _SECTION.match(line)
            current = m.group(1) if m and m.group(1) in wanted else None
            continue
        if current is None or not line.lstrip().startswith("|"):
            continue
        for token in _CODE.findall(line):
            if re.fullmatch(r"[\w./-]+", token) and (token.endswith((".py", "/") + ASSETS)) \
                    and not token.startswith("/"):
                found[current].add(token)
    return found


def modules(root: Path, package: str) -> set[str]:
    """Every module of ``package`` under ``root`` but ``__init__.py``, as its path inside the package."""
    base = root / package
    return {p.relative_to(base).as_posix() for p in base.rglob("*.py")
            if p.name != "__init__.py" and "__pycache__" not in p.parts}


def problems(root: Path, doc: str, packages: Iterable[str] = PACKAGES) -> list[str]:
    """Modules the document does not name, and paths it names that do not exist."""
    out = []
    named = named_paths(doc, packages)
    for package in packages:
        for module in sorted(modules(root, package) - named[package]):
            out.append(f"{package}/{module} is not named in docs/architecture.md")
        for path in sorted(named[package]):
            target = root / package / path
            if not (target.is_dir() if path.endswith("/") else target.is_file()):
                out.append(f"docs/architecture.md names {package}/{path}, which does not exist")
    return out


def test_the_architecture_names_every_module_and_nothing_else() -> None:
    doc = DOC.read_text(encoding="utf-8")
    named = named_paths(doc)
    assert all(named[p] for p in PACKAGES), "a package section of docs/architecture.md was not found"
    found = problems(REPO, doc)
    assert not found, "\n".join(found)


def _plant(root: Path, files: Iterable[str]) -> None:
    for rel in files:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")


def test_a_missing_module_and_a_stale_path_are_found(tmp_path: Path) -> None:
    _plant(tmp_path, ["exact/__init__.py", "exact/a.py", "exact/sub/__init__.py", "exact/sub/b.py",
                      "exact/sub/c.py", "sketch/__init__.py", "sketch/d.py"])
    doc = "\n".join([
        "# Where things are", "",
        "## `exact/` — the engine", "",
        "| module | holds |", "|---|---|",
        "| `a.py`, `sub/` | a thing (`evaluate_table`, `stats.index`, `/v1`) |",
        "| `sub/b.py`, `gone.py` | more |", "",
        "`sub/c.py` outside a table does not count.", "",
        "## `sketch/` — the index", "",
        "| module | holds |", "|---|---|",
        "| `d.py`, `e/` | the rest |",
    ])
    assert named_paths(doc, ("exact", "sketch")) == {"exact": {"a.py", "sub/", "sub/b.py", "gone.py"},
                                                      "sketch": {"d.py", "e/"}}
    assert problems(tmp_path, doc, ("exact", "sketch")) == [
        "exact/sub/c.py is not named in docs/architecture.md",
        "docs/architecture.md names exact/gone.py, which does not exist",
        "docs/architecture.md names sketch/e/, which does not exist",
    ]

"""The repository cites only documents it holds: the contract and the semantics are docs/contract.md and
docs/semantics.md, and no file points at the specification documents kept outside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"CONTRACT §|CONTRACT\.md|ARCHITECTURE\.md|digest A\d|SASE digest|shared/seeds")


def test_nothing_cites_documents_outside_the_repository() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    found = []
    for name in files:
        path = REPO / name
        if path.suffix not in {".py", ".md", ".lark", ".js", ".html", ".toml"} or not path.is_file():
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if OUTSIDE.search(line) and path.name != "test_citations.py":
                found.append(f"{name}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


def test_the_cited_documents_exist_with_the_cited_items() -> None:
    semantics = (REPO / "docs" / "semantics.md").read_text(encoding="utf-8")
    contract = (REPO / "docs" / "contract.md").read_text(encoding="utf-8")
    for item in range(1, 9):
        assert f"### A{item}." in semantics
    for section in range(1, 7):
        assert f"\n## {section}. " in contract


def test_every_worked_case_a_test_or_module_cites_is_defined_in_the_semantics() -> None:
    """A label such as ``T13`` in a test or module names a worked case of the SES thesis that
    docs/semantics.md defines (its appendix B, or the errata of appendix A)."""
    semantics = (REPO / "docs" / "semantics.md").read_text(encoding="utf-8")
    defined = set(re.findall(r"\*\*(T\d+)\*\*", semantics))
    cited: dict[str, str] = {}
    for folder in ("tests", "exact", "sketch", "api"):
        for path in (REPO / folder).rglob("*.py"):
            if path.name == "test_citations.py":
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                # in prose (docstrings and comments), not event types of synthetic streams ("SEQ(T5 a, …)")
                if '"""' in line or "#" in line or line.startswith("    ") and not re.search(r"[\"']", line):
                    for label in re.findall(r"(?<![\w-])(T\d{1,2})(?![\w-])", line):
                        if "SEQ(" not in line:
                            cited.setdefault(label, f"{path.relative_to(REPO)}:{n}")
    missing = {label: where for label, where in cited.items() if label not in defined}
    assert {"T6", "T13", "T26"} <= cited.keys()  # (the test sees the labels it is about)
    assert not missing, missing


#: the documents a section number may be cited from
_DOCUMENTS = re.compile(r"contract|semantics|thesis|Baltus|SASE|Cadonna|query-language|operations|Kolchinsky|docs/"
                        r"|paper|attribute-index|architecture")


def test_every_section_cited_in_the_code_names_its_document() -> None:
    """A bare "§3" could be the contract's, the thesis' or Baltus's: the document is named within the hundred
    characters before the section number."""
    bare = []
    for folder in ("api", "exact", "sketch"):
        for path in (REPO / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            for m in re.finditer(r"§\d", text):
                if not _DOCUMENTS.search(text[max(0, m.start() - 100):m.start()]):
                    bare.append(f"{path.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}")
    assert not bare, bare

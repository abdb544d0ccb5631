"""docs/query-language.md stays true: every query block parses; every error example fails as documented."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from exact.errors import SeqsketchError
from exact.query.language import from_json, load, parse, to_text

DOC = Path(__file__).resolve().parents[2] / "docs" / "query-language.md"
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def _blocks(language: str) -> list[str]:
    return [body for lang, body in _BLOCK.findall(DOC.read_text(encoding="utf-8")) if lang == language]


def _error_rows() -> list[tuple[str, str]]:
    """(query, documented message) of the rows of the Errors table whose query is complete."""
    section = DOC.read_text(encoding="utf-8").split("## Errors", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(PATTERN [^`]*)` \| `([^`]*)` \|$", section, flags=re.M)


def test_the_doc_has_the_examples_it_promises():
    assert len(_blocks("seqsketch")) >= 20
    assert len(_blocks("json")) >= 1
    assert len(_error_rows()) >= 8


@pytest.mark.parametrize("text", _blocks("seqsketch"))
def test_every_query_example_parses_and_reads_back(text):
    query = parse(text)
    assert parse(to_text(query)) == query
    assert load(text) == query


@pytest.mark.parametrize("text", _blocks("json"))
def test_every_json_example_loads(text):
    query = load(text)
    assert from_json(json.loads(text)) == query
    assert parse(to_text(query)) == query


@pytest.mark.parametrize(("text", "message"), _error_rows())
def test_every_error_example_fails_as_documented(text, message):
    with pytest.raises(SeqsketchError) as info:
        parse(text)
    for fragment in (f.strip() for f in message.split("…")):
        assert fragment in str(info.value), str(info.value)

"""Comparisons are checked against the dataset's attribute types: a comparison that can hold for no event
(a string attribute with a number, a numeric one with a string) is a positioned error naming the attribute's
type and the form that would work, instead of an empty answer.

The unit tests parse with the kinds given; the service tests build a real dataset (JSON Lines with an
integer, a float, a boolean and a string attribute) and ask in every mode, by text and by the JSON form.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exact.errors import QuerySemanticError
from exact.query.language import attribute_kinds, check_kinds, load, parse, to_json

KINDS = attribute_kinds({"amount": "int64", "price": "double", "open": "bool", "resource": "string"})


def test_stored_types_become_kinds() -> None:
    assert KINDS == {"amount": "integer", "price": "number", "open": "boolean", "resource": "string"}
    assert attribute_kinds({"x": "some-future-type"}) == {}  # an unknown stored type is not checked


def test_string_attribute_with_a_number_points_at_the_number() -> None:
    text = "PATTERN SEQ(A a, B b)\nWHERE a.resource > 50000"
    with pytest.raises(QuerySemanticError) as err:
        parse(text, KINDS)
    assert (err.value.line, err.value.column) == (2, text.splitlines()[1].index("50000") + 1)
    message = str(err.value)
    assert "a.resource is a string attribute" in message and "a.resource > '50000'" in message
    assert "order as text" in message  # an ordering of numbers written as strings is not numeric


def test_numeric_attribute_with_a_string() -> None:
    with pytest.raises(QuerySemanticError) as err:
        parse("PATTERN SEQ(A a) WHERE a.amount = '50000'", KINDS)
    assert "int64" in str(err.value) and "a.amount = 50000" in str(err.value)  # numeric text: unquote it
    with pytest.raises(QuerySemanticError) as err:
        parse("PATTERN SEQ(A a) WHERE 'high' <= a.price", KINDS)
    assert "double" in str(err.value) and "without quotes" not in str(err.value)
    assert err.value.column == len("PATTERN SEQ(A a) WHERE ") + 1


def test_boolean_and_field_to_field() -> None:
    with pytest.raises(QuerySemanticError, match="compare it with true or false"):
        parse("PATTERN SEQ(A a) WHERE a.open = 1", KINDS)
    with pytest.raises(QuerySemanticError, match="never equal or ordered"):
        parse("PATTERN SEQ(A a, B b) WHERE a.resource = b.amount", KINDS)
    with pytest.raises(QuerySemanticError, match="a.resource is a string attribute"):
        parse("PATTERN SEQ(A a, B+ b) WHERE a.resource < max(b.amount)", KINDS)


def test_comparisons_that_can_hold_are_accepted() -> None:
    accepted = [
        "PATTERN SEQ(A a, B b) WHERE a.amount < b.price",  # integers and floats compare
        "PATTERN SEQ(A a) WHERE a.amount = null",  # (names no kind; holds for no event)
        "PATTERN SEQ(A a) WHERE a.resource != null AND a.resource = 'x'",
        "PATTERN SEQ(A a) WHERE a.open = true",
        "PATTERN SEQ(A a, B+ b) WHERE a.amount < sum(b.resource)",  # sum is a number whatever it folds
        "PATTERN SEQ(A a) WHERE a.unknown = 5",  # not an attribute of the dataset (yet): no kind to check
        "PATTERN SEQ(A a) WHERE a.type = 'A'",
    ]
    for text in accepted:
        assert parse(text, KINDS) == parse(text)


def test_json_form_names_the_path() -> None:
    obj = to_json(parse("PATTERN SEQ(A a) WHERE a.resource = 7"))
    with pytest.raises(QuerySemanticError) as err:
        load(obj, KINDS)
    assert err.value.where == "JSON where[0].right"  # the literal
    with pytest.raises(QuerySemanticError):
        check_kinds(parse("PATTERN SEQ(A a) WHERE a.resource = 7"), KINDS)


@pytest.fixture
def typed_dataset(home: Path, tmp_path: Path) -> Path:
    from api.service import build_from_inputs

    rows = [{"type": "A" if i % 2 == 0 else "B", "ts": f"2024-01-01T00:00:{i:02d}Z", "amount": i * 100,
             "price": i / 4, "open": i % 3 == 0, "resource": f"r{i % 4}"} for i in range(40)]
    path = tmp_path / "typed.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    build_from_inputs(home, "typed", [path])
    return home


@pytest.mark.parametrize("mode", ["approximate", "verified", "exact"])
def test_the_service_refuses_a_comparison_no_event_can_satisfy(typed_dataset: Path, mode: str) -> None:
    from api.service import run_query

    text = "PATTERN SEQ(A a, B b) WHERE a.resource = 3 WITHIN 5 EVENTS"
    with pytest.raises(QuerySemanticError) as err:
        run_query(typed_dataset, "typed", text, mode=mode)
    assert (err.value.line, err.value.column) == (1, text.index("3") + 1)
    with pytest.raises(QuerySemanticError) as err:
        run_query(typed_dataset, "typed", to_json(parse(text)), mode=mode)
    assert err.value.where == "JSON where[0].right"
    # the same question in the form that works answers it
    fixed = run_query(typed_dataset, "typed", "PATTERN SEQ(A a, B b) WHERE a.resource = 'r2' AND "
                      "b.amount > 1500 WITHIN 5 EVENTS RETURN count", mode=mode)
    assert fixed["exists"] is True


def test_http_answers_400_with_the_position(typed_dataset: Path) -> None:
    from api.app import create_app

    app = create_app()
    client = app.test_client()
    response = client.post("/v1/datasets/typed/query", json={"query": "PATTERN SEQ(A a) WHERE a.amount > '10'"})
    assert response.status_code == 400
    error = response.json["error"]
    column = len("PATTERN SEQ(A a) WHERE a.amount > ") + 1
    assert error["code"] == "query_semantic" and error["position"] == {"line": 1, "column": column}
    assert "int64" in error["message"]

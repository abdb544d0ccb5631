"""Query texts are parsed once and remembered; a refused text is refused every time it is asked."""

from __future__ import annotations

import pytest

from api.service.queries import parsed_query
from exact.errors import QuerySyntaxError
from exact.query.language import to_json


def test_a_text_asked_again_is_not_parsed_again() -> None:
    text = "PATTERN SEQ(A a, B b) WHERE a.x > 3 WITHIN 5 seconds RETURN count"
    first = parsed_query(text)
    assert parsed_query(text) is first
    assert parsed_query(to_json(first)) == first  # (the JSON form is read as before: its dicts are not kept)


@pytest.mark.parametrize("text", ["PATTERN SEQ(A a, B b", "PATTERN SEQ('\ud800' a)"])
def test_a_refused_text_is_refused_each_time(text: str) -> None:
    for _ in range(2):
        with pytest.raises(QuerySyntaxError):
            parsed_query(text)

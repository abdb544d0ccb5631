"""The query language of docs/contract.md §2: text and JSON forms of the pattern AST in :mod:`exact.query.ast`.

    parse(text) -> Query        text → checked AST (errors carry line and column)
    to_text(query) -> str       canonical text; parse(to_text(q)) == q
    condition_text(cond) -> str one condition of a query in the same form (likewise element_text,
                                window_text)
    to_json(query) -> dict      the versioned JSON form; from_json(to_json(q)) == q
    from_json(obj) -> Query     JSON form → checked AST (errors carry the JSON path)
    load(obj) -> Query          whichever form is given: a dict, JSON text, or query text

The grammar is ``query.lark`` (Lark, LALR(1)); the language is documented in docs/query-language.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from exact.errors import QueryLimitError, QuerySyntaxError
from exact.query.ast import Query
from exact.query.language.checks import MAX_CONDITIONS, MAX_QUERY_BYTES, MAX_VARIABLES
from exact.query.language.jsonform import from_json, to_json
from exact.query.language.kinds import attribute_kinds, check_attribute_kinds
from exact.query.language.locator import Locator
from exact.query.language.parser import parse
from exact.query.language.printer import condition_text, element_text, to_text, window_text

__all__ = ["MAX_CONDITIONS", "MAX_QUERY_BYTES", "MAX_VARIABLES", "attribute_kinds", "check_kinds", "condition_text",
           "element_text", "from_json", "load", "parse", "to_json", "to_text", "window_text"]


def load(obj: str | dict[str, Any], attr_kinds: Mapping[str, str] | None = None) -> Query:
    """A query from either form: a JSON object (dict), JSON text (starts with ``{``), or query text.
    ``attr_kinds`` (:func:`attribute_kinds` of a dataset's attribute types) checks its comparisons against
    the dataset's attributes."""
    if isinstance(obj, dict):
        return from_json(obj, attr_kinds)
    if not isinstance(obj, str):
        raise QuerySyntaxError(f"a query must be text or a JSON object, not {type(obj).__name__}")
    if obj.lstrip().startswith("{"):
        return from_json(_json_text(obj), attr_kinds)
    return parse(obj, attr_kinds)


def _json_text(text: str) -> Any:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_QUERY_BYTES:
        raise QueryLimitError(f"the query is {size} bytes long; at most {MAX_QUERY_BYTES} are allowed")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise QuerySyntaxError(f"invalid JSON: {exc.msg}", line=exc.lineno, column=exc.colno) from None
    except RecursionError:
        raise QueryLimitError("the JSON query is nested too deeply") from None


def check_kinds(query: Query, attr_kinds: Mapping[str, str]) -> Query:
    """``query`` (already parsed, so without positions) checked against a dataset's attribute kinds."""
    check_attribute_kinds(query, Locator(), attr_kinds)
    return query

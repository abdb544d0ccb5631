"""What every schema of the API is: a named JSON Schema (draft 2020-12, integers that are integers in the JSON
text) that validates a value and names the record and field at fault (:class:`RequestInvalid`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from jsonschema.validators import extend

from exact.errors import SeqsketchError

JSON = dict[str, Any]
DATASET_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"


class RequestInvalid(SeqsketchError):
    """A request body or parameter that does not fit its schema."""

    code = "bad_request"


class PayloadTooLarge(SeqsketchError):
    code = "payload_too_large"
    http_status = 413


def _where(path: Iterator[Any] | Any, prefix: str = "") -> str:
    """``record 3, field 'ts'`` style location of a JSON path, for error messages."""
    parts = [prefix] if prefix else []
    for step in path:
        parts.append(f"item {step}" if isinstance(step, int) else f"field {step!r}")
    return ", ".join(parts) or "request body"


def _is_integer(_checker: Any, value: Any) -> bool:
    # JSON Schema counts 2.0 as an integer; this API does not: a count, a level or a size is written 2.
    return isinstance(value, int) and not isinstance(value, bool)


#: Draft 2020-12 with integers that are integers in the JSON text.
_Validator = extend(Draft202012Validator,
                    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer))


@dataclass(frozen=True)
class Schema:
    """A named JSON Schema that validates values and is published under ``components/schemas``."""

    name: str
    schema: JSON

    @cached_property
    def _validator(self) -> Draft202012Validator:
        Draft202012Validator.check_schema(self.schema)
        return _Validator(self.schema)

    def errors(self, value: Any) -> list[ValidationError]:
        return list(self._validator.iter_errors(value))

    def validate(self, value: Any, *, where: str = "") -> None:
        """Raise :class:`RequestInvalid` naming the first offending place when ``value`` does not fit."""
        error = best_match(self._validator.iter_errors(value))
        if error is not None:
            raise RequestInvalid(f"{error.message}", where=_where(error.absolute_path, where))

    def ref(self) -> JSON:
        return {"$ref": f"#/components/schemas/{self.name}"}

"""JSON text of the service's answers: always valid JSON, with a number that is not finite written as null.

JSON has no NaN or infinity.  Appends over HTTP refuse them (docs/contract.md §1.2), but a file may hold them
(a CSV's ``NaN``, a Parquet double), and Arrow answers keep them exactly; in JSON they become ``null`` — never
the bare ``NaN`` / ``Infinity`` that Python's encoder writes by default and strict parsers reject.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every float that is not finite replaced by None (containers copied only where one is)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` that never writes NaN or Infinity: such a number is written as null."""
    try:
        return json.dumps(value, allow_nan=False, **kwargs)
    except ValueError:  # (the rare answer that holds one: mended, then written)
        return json.dumps(finite(value), allow_nan=False, **kwargs)

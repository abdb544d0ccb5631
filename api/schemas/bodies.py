"""Request bodies parsed: JSON or NDJSON text to values, whose syntax errors name their line and column and
whose invalid Unicode names its field, and an append batch checked record by record."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from api.schemas.base import JSON, RequestInvalid, _where
from api.schemas.definitions import EVENT


def check_text(value: Any, where: str = "") -> Any:
    """``value`` (parsed JSON) when every string and key in it is valid Unicode; else :class:`RequestInvalid`
    naming the field.  JSON may escape a lone surrogate (``"\\ud800"``), which no UTF-8 text can hold."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            _valid_unicode(item, path, where)
        elif isinstance(item, dict):
            for key, sub in item.items():
                _valid_unicode(key, path, where, key=True)
                stack.append((sub, (*path, key)))
        elif isinstance(item, list):
            stack.extend((sub, (*path, i)) for i, sub in enumerate(item))
    return value


def _valid_unicode(text: str, path: tuple[Any, ...], where: str, *, key: bool = False) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        what = "a key" if key else "the text"
        raise RequestInvalid(f"{what} holds invalid Unicode (a lone surrogate, U+{ord(text[err.start]):04X}, "
                             f"at character {err.start + 1})", where=_where(path, where)) from None


#: A JSON escape of a UTF-16 surrogate, or a surrogate encoded as UTF-8 bytes (which ``json.loads`` lets
#: through): the only ways a body decoded from UTF-8 can hold a lone one.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
_SURROGATE_ESCAPE_TEXT = re.compile(r"\\u[dD][89a-fA-F]")


#: A number JSON's grammar does not have (``NaN``, ``Infinity``, which Python's decoder takes), one whose
#: exponent may overflow a double, or a run of digits long enough that an integer may need care.
_NON_FINITE = re.compile(rb"NaN|Infinity|[eE][+]?[0-9]{3}|[0-9]{300}")
_NON_FINITE_TEXT = re.compile(r"NaN|Infinity|[eE][+]?[0-9]{3}|[0-9]{300}")
#: the longest integer a body may write (64-bit integers have at most 20 characters)
_LONGEST_INT = 100


def _int(text: str) -> int:
    if len(text.lstrip("-").lstrip("0")) > _LONGEST_INT:
        raise RequestInvalid(f"an integer of {len(text)} digits is far outside the signed 64-bit range (send a "
                             "number that large as a string)", where="request body")
    return int(text)


def check_finite(value: Any, where: str = "") -> Any:
    """``value`` (parsed JSON) when every number in it is finite; else :class:`RequestInvalid` naming the
    field.  JSON has no NaN or infinity, but Python's decoder reads ``NaN`` and ``Infinity`` and turns ``1e309``
    into an infinity: none of them is stored, or they would come back as text no JSON parser reads."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise RequestInvalid(f"{item!r} is not a finite number; JSON numbers are finite (send a missing "
                                 "value as null)", where=_where(path, where))
        if isinstance(item, dict):
            stack.extend((sub, (*path, key)) for key, sub in item.items())
        elif isinstance(item, list):
            stack.extend((sub, (*path, i)) for i, sub in enumerate(item))
    return value


def _checked(value: Any, raw_has: bool, records: bool) -> Any:
    if not raw_has:
        return value
    if records and isinstance(value, list):
        for i, item in enumerate(value):
            check_finite(item, f"record {i}")
        return value
    return check_finite(value)


#: each byte of a body as :func:`_may_be_odd` looks at it: digits as ``1``, exponent marks as ``e``, ``+``
#: kept, anything else a space
_NUMERIC_SHAPE = bytes(ord("1") if chr(b).isdigit() and b < 128 else ord("e") if b in b"eE" else b if b == ord("+")
                       else ord(" ") for b in range(256))


def _may_be_odd(raw: bytes) -> bool:
    """Whether a body may hold a number that is not finite or too long (what :data:`_NON_FINITE` finds),
    found by a translation and a few substring searches (the pattern took three times as long as parsing
    the body).  It may say so of a body that holds none (``e123`` inside a string): that body is then
    parsed and checked the careful way."""
    if b"NaN" in raw or b"Infinity" in raw:
        return True
    shape = raw.translate(_NUMERIC_SHAPE)
    return b"e111" in shape or b"e+111" in shape or b"1" * 300 in shape


def parse_json_body(raw: bytes, *, records: bool = False) -> Any:
    """The JSON value of a request body; a syntax error names its line and column, invalid Unicode or a
    number that is not finite its field (with ``records``, the items of a top-level array are named
    ``record i``)."""
    if not raw.strip():
        raise RequestInvalid("the request body is empty; expected JSON", where="request body")
    try:
        odd = _may_be_odd(raw)
        value = _checked(json.loads(raw, parse_int=_int) if odd else json.loads(raw), odd, records)
        if b"\x00" not in raw and ((b"\\u" not in raw and b"\xed" not in raw) or not _SURROGATE_ESCAPE.search(raw)):
            return value  # (no surrogate escaped or encoded: every string is valid Unicode)
        if records and isinstance(value, list):
            for i, item in enumerate(value):
                check_text(item, f"record {i}")
            return value
        return check_text(value)
    except UnicodeDecodeError:
        raise RequestInvalid("the request body is not UTF-8", where="request body") from None
    except json.JSONDecodeError as err:
        raise RequestInvalid(f"invalid JSON: {err.msg}", line=err.lineno, column=err.colno,
                             where="request body") from None
    except RecursionError:  # e.g. 100,000 nested brackets: Python's decoder gives up on the depth
        raise RequestInvalid("invalid JSON: nested too deeply", where="request body") from None


def parse_ndjson_body(raw: bytes) -> list[Any]:
    """One JSON value per non-blank line (NDJSON); an error names the line."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestInvalid("the request body is not UTF-8", where="request body") from None
    records: list[Any] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            odd = _NON_FINITE_TEXT.search(line) is not None
            value = json.loads(line, parse_int=_int) if odd else json.loads(line)
            if odd:
                check_finite(value, f"record {len(records)}")
            records.append(value if not _SURROGATE_ESCAPE_TEXT.search(line)
                           else check_text(value, f"record {len(records)}"))
        except json.JSONDecodeError as err:
            raise RequestInvalid(f"invalid JSON: {err.msg}", line=lineno, column=err.colno,
                                 where="NDJSON body") from None
        except RecursionError:
            raise RequestInvalid("invalid JSON: nested too deeply", line=lineno,
                                 where="NDJSON body") from None
    if not records:
        raise RequestInvalid("the NDJSON body has no records", where="request body")
    return records


def validate_events(records: Any, *, empty: bool = False) -> list[JSON]:
    """Check an append batch record by record; the error names the record (0-based) and field.  ``empty``: a
    batch of no events is allowed (an append that only moves the watermark)."""
    if not isinstance(records, list):
        raise RequestInvalid("expected a JSON array of events (or NDJSON, one event per line)",
                             where="request body")
    if not records and not empty:
        raise RequestInvalid("the batch has no events (an append of none needs ?watermark=TIME)",
                             where="request body")
    if _batch_fits(records):
        return records
    for i, record in enumerate(records):
        if isinstance(record, dict) and "seq" in record:
            raise RequestInvalid("seq is assigned by the service (events are numbered after the dataset's "
                                 "last event); leave it out", where=f"record {i}, field 'seq'")
        if not event_fits(record):  # (the schema's own check names what is wrong)
            EVENT.validate(record, where=f"record {i}")
    return records


#: the kinds of value an event's fields and attributes may have (no list or object)
_SCALAR_KINDS = frozenset({str, int, float, bool, type(None)})


def _batch_fits(records: list[Any]) -> bool:
    """Does every record of a batch whose records all have the same fields (a feed's batch) fit the
    ``Event`` schema — :func:`event_fits` of each, a field at a time?  False for any other batch (then
    checked one by one)."""
    if not records or any(type(r) is not dict for r in records):
        return False
    fields = tuple(records[0])
    if "seq" in fields or "type" not in fields or "ts" not in fields or any(tuple(r) != fields for r in records):
        return False
    kinds = [r["type"] for r in records]
    if set(map(type, kinds)) != {str} or not all(kinds):
        return False
    if not set(map(type, (r["ts"] for r in records))) <= {str, int, float}:
        return False
    for name in fields:
        if name == "attrs":
            nested = [r["attrs"] for r in records]
            if set(map(type, nested)) != {dict}:
                return False
            if not {type(v) for a in nested for v in a.values()} <= _SCALAR_KINDS:
                return False
        elif name not in ("type", "ts") and not set(map(type, (r[name] for r in records))) <= _SCALAR_KINDS:
            return False
    return True


def event_fits(record: Any) -> bool:
    """Does ``record`` (parsed JSON) fit the ``Event`` schema?  The same answer as the schema's validator
    (a test holds them equal), in a few type checks: a batch of thousands is checked in a millisecond, where
    the validator took a tenth of a second."""
    if not isinstance(record, dict) or "seq" in record:
        return False
    kind, ts = record.get("type"), record.get("ts")
    if not isinstance(kind, str) or not kind or ts is None or isinstance(ts, (bool, list, dict)):
        return False
    for key, value in record.items():
        if key == "attrs":
            if not isinstance(value, dict) or any(isinstance(v, (list, dict)) for v in value.values()):
                return False
        elif isinstance(value, (list, dict)):
            return False
    return True

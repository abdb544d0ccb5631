"""The append path's shortcuts say what the slow checks say: the quick record check what the ``Event``
schema's validator says, on any JSON value; the body parser's skipped Unicode walk what the walk says."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from api.schemas.base import RequestInvalid
from api.schemas.bodies import _NON_FINITE, _batch_fits, _may_be_odd, check_text, event_fits, parse_json_body
from api.schemas.definitions import EVENT

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=3))
_JSON = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=2),
                                                        st.dictionaries(st.text(max_size=3), inner, max_size=2)),
                     max_leaves=4)
_KEYS = st.sampled_from(["type", "ts", "attrs", "seq", "case", "amount"])


@st.composite
def records(draw: st.DrawFn) -> Any:
    """An event that fits, then none, one or two of its fields (or a new one) set to any JSON value; now and
    then any JSON value at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(_JSON)
    record: dict[str, Any] = {"type": draw(st.text(min_size=1, max_size=2)),
                              "ts": draw(st.one_of(st.text(max_size=2), st.integers(), st.floats()))}
    if draw(st.booleans()):
        record["attrs"] = draw(st.dictionaries(st.text(max_size=2), _SCALARS, max_size=2))
    for _ in range(draw(st.integers(0, 2))):
        key = draw(_KEYS)
        if key == "attrs" and draw(st.booleans()):
            earlier = record.get("attrs")  # (a draw before may have set it to any JSON value)
            record["attrs"] = {**(earlier if isinstance(earlier, dict) else {}), draw(st.text(max_size=1)): draw(_JSON)}
        else:
            record[key] = draw(_JSON)
    return record


def _schema_says(record: Any) -> bool:
    try:
        EVENT.validate(record)
    except RequestInvalid:
        return False
    return True


@given(records())
def test_the_quick_check_is_the_schema(record: Any) -> None:
    assert event_fits(record) == _schema_says(record), record


@given(st.lists(records(), min_size=1, max_size=3), st.booleans())
def test_the_batch_check_is_the_quick_check_of_each(batch: list[Any], same_fields: bool) -> None:
    if same_fields and all(isinstance(r, dict) for r in batch):  # (the batches a feed sends: one shape)
        shape = batch[0]
        batch = [{k: (r.get(k, v) if isinstance(r, dict) else v) for k, v in shape.items()} for r in batch]
    if _batch_fits(batch):
        assert all(event_fits(r) for r in batch), batch


def test_a_feed_batch_is_checked_at_once() -> None:
    batch = [{"type": "A", "ts": 1.5 + i, "case": "c", "attrs": {"x": i}} for i in range(3)]
    assert _batch_fits(batch)
    assert not _batch_fits(batch + [{"type": "A", "ts": 9, "case": "c"}])  # (fields differ: one by one)
    assert not _batch_fits([{"type": "A", "ts": True}])


@given(st.binary(max_size=40) | st.text(alphabet="0123456789eE+-.NaInfity\" ", max_size=400).map(str.encode))
def test_the_quick_number_scan_misses_nothing_the_pattern_finds(raw: bytes) -> None:
    if _NON_FINITE.search(raw):
        assert _may_be_odd(raw), raw
    assert _may_be_odd(b"[1e400]") and _may_be_odd(b"NaN") and _may_be_odd(b"1" * 300)
    assert not _may_be_odd(b'[{"type": "A", "ts": 1.5e9, "x": 12}]')


def test_examples() -> None:
    assert event_fits({"type": "A", "ts": 1, "case": "c", "attrs": {"x": None}})
    assert not event_fits({"type": "", "ts": 1})
    assert not event_fits({"type": "A", "ts": True})
    assert not event_fits({"type": "A", "ts": 1, "x": [1]})
    assert not event_fits({"type": "A", "ts": 1, "attrs": {"x": {}}})


def _slow_verdict(raw: bytes) -> str:
    """What the body parser said before its shortcut: every string of the parsed value checked."""
    try:
        check_text(json.loads(raw))
    except RequestInvalid:
        return "refused"
    except (ValueError, RecursionError):
        return "not JSON"
    return "ok"


@given(st.lists(st.one_of(st.text(max_size=4), st.sampled_from(["\ud800", "\udfff", "\ud83d\ude00", "é"])),
                max_size=4), st.sampled_from(["escaped", "raw"]))
def test_the_body_shortcut_refuses_every_lone_surrogate(texts: list[str], form: str) -> None:
    """A body without a surrogate escape or encoded surrogate skips the Unicode walk; with one, it walks: the
    same verdict as walking every body, whether the strings are escaped (``\\ud800``) or written as bytes."""
    body = json.dumps(texts, ensure_ascii=form == "escaped")
    raw = body.encode("utf-8", "surrogatepass")
    try:
        parse_json_body(raw)
        verdict = "ok"
    except RequestInvalid:
        verdict = "refused"
    assert verdict == _slow_verdict(raw)

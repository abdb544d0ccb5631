"""The XES reader: an event log streamed with expat, one batch of events at a time.

Fed 1 MiB at a time: no element tree is built at all, so memory stays at one batch whatever the log's size,
and every error can name its line.  type = ``concept:name``, ts = ``time:timestamp``; the trace's
``concept:name`` becomes attribute ``case``; every other attribute of the event and of its trace is kept,
typed by its XES element (``int``, ``float``, ``boolean``, ``string``/``id``, ``date`` → ISO-8601 UTC text).
An event attribute wins over a trace attribute of the same key.  Nested attributes, ``list``/``container``
values and log-level attributes and globals are not event data and are skipped.
"""


from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from xml.parsers import expat

import pyarrow as pa

from exact.errors import InputError
from exact.events import iso_date_text, micros_of, parse_timestamp
from exact.readers.common import Columns, ReadOptions, no_events, open_binary, read_chunks

_XES_VALUE_TAGS = frozenset({"string", "date", "int", "float", "boolean", "id"})
_XES_TYPE, _XES_TIME, _CASE = "concept:name", "time:timestamp", "case"


class _XesHandler:
    """Expat callbacks turning ``<trace>``/``<event>`` elements into column rows (see module docstring)."""

    def __init__(self, parser: Any, where: str) -> None:
        self.parser = parser
        self.where = where
        # Depths instead of an element stack: these callbacks run once per XML element (millions).
        self.depth = 0
        self.trace_depth = -1
        self.event_depth = -1
        self.trace: dict[str, Any] | None = None
        self.trace_row: dict[str, Any] | None = None
        self.event: dict[str, Any] | None = None
        self.event_line = 0
        self.batch = Columns()
        self.count = 0

    def error(self, message: str, line: int | None = None) -> InputError:
        return InputError(message, where=self.where, line=line or self.parser.CurrentLineNumber)

    def start(self, name: str, attrs: list[str]) -> None:
        # ordered_attributes: attrs is [name1, value1, name2, value2, ...], cheaper than a dict each.
        self.depth = depth = self.depth + 1
        if ":" in name:
            name = name.rsplit(":", 1)[1]
        if name in _XES_VALUE_TAGS:
            event = self.event
            if event is not None:
                target = event if depth == self.event_depth + 1 else None
            else:
                target = self.trace if depth == self.trace_depth + 1 else None
            if target is not None:
                key: str | None
                value: str | None
                if len(attrs) == 4 and attrs[0] == "key" and attrs[2] == "value":
                    key, value = attrs[1], attrs[3]
                else:
                    pairs = dict(zip(attrs[::2], attrs[1::2], strict=True))
                    key, value = pairs.get("key"), pairs.get("value")
                if not key:
                    raise self.error(f"<{name}> attribute has no 'key'")
                target[key] = value if name == "string" and value is not None else \
                    self.typed_value(name, key, value)
        elif name == "event" and self.event is None and depth in (2, self.trace_depth + 1):
            self.event = {}
            self.event_depth = depth
            self.event_line = self.parser.CurrentLineNumber
        elif name == "trace" and depth == 2:
            self.trace = {}
            self.trace_row = None
            self.trace_depth = depth

    def typed_value(self, tag: str, key: str, value: str | None) -> Any:
        if value is None:
            raise self.error(f"field {key!r}: <{tag}> has no 'value'")
        try:
            if tag == "int":
                return int(value)
            if tag == "float":
                return float(value)
            if tag == "boolean":
                low = value.strip().lower()
                if low not in ("true", "false"):
                    raise ValueError(f"not a boolean: {value!r}")
                return low == "true"
            if tag == "date":
                return value if key == _XES_TIME else iso_date_text(value.strip())
        except ValueError as err:
            raise self.error(f"field {key!r}: bad <{tag}> value: {err}") from None
        return value

    def end(self, name: str) -> None:
        depth = self.depth
        self.depth -= 1
        if depth == self.event_depth and self.event is not None:
            event, self.event, self.event_depth = self.event, None, -1
            self.emit(event)
        elif depth == self.trace_depth:
            self.trace, self.trace_row, self.trace_depth = None, None, -1

    def emit(self, event: dict[str, Any]) -> None:
        typ = event.pop(_XES_TYPE, None)
        if not isinstance(typ, str) or not typ:
            raise self.error(f"event has no field {_XES_TYPE!r} (its type)", self.event_line)
        raw_ts = event.pop(_XES_TIME, None)
        if raw_ts is None:
            raise self.error(f"event has no field {_XES_TIME!r} (its time)", self.event_line)
        try:
            ts = micros_of(datetime.fromisoformat(raw_ts))  # the XES form; anything else takes the long way
        except (TypeError, ValueError):
            ts = None
        try:
            ts = parse_timestamp(raw_ts) if ts is None else ts
        except ValueError as err:
            raise self.error(f"field {_XES_TIME!r}: {err}", self.event_line) from None
        if self.trace_row is None:  # the trace's attributes, as every one of its events carries them
            self.trace_row = {(_CASE if k == _XES_TYPE else k): v for k, v in (self.trace or {}).items()}
        row = {**self.trace_row, **event} if self.trace_row else event
        self.batch.add(ts, typ, row)
        self.count += 1


def read_xes(path: Path, options: ReadOptions) -> Iterator[pa.Table]:
    """Stream an XES log (plain or gzipped) in batches; see the module docstring for the mapping."""
    where = str(path)
    parser = expat.ParserCreate()
    parser.ordered_attributes = True
    handler = _XesHandler(parser, where)
    parser.StartElementHandler = handler.start
    parser.EndElementHandler = handler.end
    with open_binary(path) as stream:
        saw_bytes = False
        for chunk in read_chunks(stream, where):
            saw_bytes = saw_bytes or bool(chunk.strip())
            _feed(parser, chunk, False, where)
            if len(handler.batch) >= options.batch_rows:
                yield handler.batch.table()
                handler.batch = Columns()
        if not saw_bytes:
            raise InputError("empty file", where=where)
        _feed(parser, b"", True, where)
    if len(handler.batch):
        yield handler.batch.table()
    if handler.count == 0:
        raise no_events(where)


def _feed(parser: Any, data: bytes, final: bool, where: str) -> None:
    try:
        parser.Parse(data, final)
    except expat.ExpatError as err:
        raise InputError(f"malformed XML: {expat.ErrorString(err.code)}", where=where, line=err.lineno,
                         column=err.offset + 1) from None
    except (LookupError, ValueError) as err:  # an encoding Python does not know, or expat cannot use
        raise InputError(f"malformed XML: {err}", where=where, line=parser.CurrentLineNumber) from None

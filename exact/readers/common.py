"""What every reader shares: the options, one batch of events being gathered, opening (gunzipping) and
reading an input, and the errors that name the file and line (docs/contract.md §1)."""


from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from exact.errors import InputError
from exact.events import attr_array, make_table, parse_timestamp

#: Records per batch: large enough that Arrow does the work, small enough to bound memory per batch.
BATCH_ROWS = 65_536
DEFAULT_TYPE_FIELD = "type"
DEFAULT_TIME_FIELD = "ts"
_CHUNK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class ReadOptions:
    """How to read one input: field names (csv/jsonl/parquet), text ts origin (seconds), batch size."""

    type_field: str = DEFAULT_TYPE_FIELD
    time_field: str = DEFAULT_TIME_FIELD
    text_origin: int = 0
    batch_rows: int = BATCH_ROWS


class Columns:
    """One batch being read: ts and type columns, attributes gathered per event and made columns at the end.

    Columns are built per batch with one comprehension per attribute, which is much cheaper than padding
    every column for every event; only one batch of rows is alive at a time.
    """

    def __init__(self) -> None:
        self.ts: list[int] = []
        self.types: list[str] = []
        self.rows: list[dict[str, Any]] = []
        self.keys: dict[str, None] = {}  # attribute names in first-seen order

    def __len__(self) -> int:
        return len(self.ts)

    def add(self, ts: int, typ: str, attrs: dict[str, Any]) -> None:
        self.ts.append(ts)
        self.types.append(typ)
        self.rows.append(attrs)
        if attrs.keys() - self.keys.keys():
            self.keys.update(dict.fromkeys(attrs))

    def table(self) -> pa.Table:
        rows = self.rows
        columns = {k: attr_array([r.get(k) for r in rows]) for k in self.keys}
        return make_table(self.ts, self.types, columns)


def open_binary(path: Path) -> IO[bytes]:
    """The file's bytes, gunzipped when it starts with the gzip magic (whatever its name)."""
    raw = open(path, "rb")  # noqa: SIM115 - handed to the caller
    head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    if head == _GZIP_MAGIC:
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


def read_chunks(stream: IO[bytes], where: str) -> Iterator[bytes]:
    try:
        while chunk := stream.read(_CHUNK):
            yield chunk
    except READ_ERRORS as err:
        raise unreadable(err, where) from None


#: What reading a damaged input stream raises (a truncated or corrupt gzip member, an I/O error).
READ_ERRORS = (OSError, EOFError, zlib.error)


def unreadable(err: BaseException, where: str, line: int | None = None) -> InputError:
    return InputError(f"cannot read: {err}", where=where, line=line)


def no_events(where: str) -> InputError:
    return InputError("empty file: no events", where=where)


def ts_or_error(value: Any, field: str, where: str, line: int | None = None,
                record: int | None = None) -> int:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise InputError(f"field {field!r}: missing time", where=_where(where, record), line=line)
    try:
        return parse_timestamp(value)
    except ValueError as err:
        raise InputError(f"field {field!r}: {err}", where=_where(where, record), line=line) from None


def _where(where: str, record: int | None) -> str:
    return where if record is None else f"{where}: record {record}"


def json_scalar(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return value

"""The events the reference reads: a stream table as a list of :class:`Ev`, and a stream table made from rows
(the tests write their streams this way)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa


@dataclass(frozen=True)
class Ev:
    seq: int
    ts: int
    type: str
    attrs: Mapping[str, Any]

    def get(self, attr: str) -> Any:
        if attr == "seq":
            return self.seq
        if attr == "ts":
            return self.ts
        if attr == "type":
            return self.type
        return self.attrs.get(attr)


def stream_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """A stream-schema table from rows ``{"seq"?, "ts", "type", attr: value, ...}`` (seq defaults to the
    row index, ts is UTC microseconds); attribute types are inferred per column (int64, double, bool,
    string), a column with no values is left out."""
    names: list[str] = []
    for r in rows:
        for k in r:
            if k not in ("seq", "ts", "type") and k not in names:
                names.append(k)
    seq = [int(r.get("seq", i)) for i, r in enumerate(rows)]
    cols: dict[str, pa.Array] = {
        "seq": pa.array(seq, pa.int64()),
        "ts": pa.array([int(r["ts"]) for r in rows], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "type": pa.array([str(r["type"]) for r in rows], pa.string()),
    }
    fields = []
    for name in names:
        vals = [r.get(name) for r in rows]
        present = [v for v in vals if v is not None]
        if not present:
            continue
        if all(isinstance(v, bool) for v in present):
            typ = pa.bool_()
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in present):
            typ = pa.int64()
        elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
            typ = pa.float64()
            vals = [None if v is None else float(v) for v in vals]
        else:
            typ = pa.string()
            vals = [None if v is None else str(v) for v in vals]
        fields.append((name, pa.array(vals, typ)))
    if fields:
        cols["attrs"] = pa.StructArray.from_arrays([a for _, a in fields], names=[n for n, _ in fields])
    return pa.table(cols)


def read_events(table: pa.Table) -> list[Ev]:
    rows = table.to_pylist()
    out = []
    for r in rows:
        ts = r["ts"]
        micros = ts if isinstance(ts, int) else _micros(ts)
        out.append(Ev(int(r["seq"]), micros, r["type"], dict(r.get("attrs") or {})))
    out.sort(key=lambda e: e.seq)
    return out


def _micros(dt: Any) -> int:
    from datetime import UTC, datetime, timedelta
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta: timedelta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds

"""A query's answer as the SDK hands it over (docs/contract.md §3, §3.6): :class:`QueryResult`, its rows as
JSON objects or as an Arrow table."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True)
class QueryResult:
    """A query answer (docs/contract.md §3); ``raw`` is the whole JSON object — or, for an answer fetched as
    Arrow (``Client.query(..., format="arrow")``), everything but its rows, which are ``table``."""

    raw: JSON = field(repr=False)
    #: the rows (matches, cases or intervals) as the server sent them in Arrow form (None: sent as JSON)
    table: Any = field(default=None, repr=False)

    def to_arrow(self) -> Any:
        """The answer's rows — matches, cases, intervals or a summary's rows (docs/contract.md §3.6, §3.7) — as
        a ``pyarrow.Table``:
        as sent in Arrow form, or made from the JSON rows (a variable whose every binding is one event is
        then one seq column, otherwise a list column)."""
        if self.table is not None:
            return self.table
        return _table_of_json(self.raw)

    def to_pandas(self) -> Any:
        """:meth:`to_arrow` as a ``pandas.DataFrame`` (times as timezone-aware timestamps)."""
        return self.to_arrow().to_pandas()

    @property
    def cases(self) -> list[JSON]:
        """``RETURN cases``: each case holding a match, with its number of matches and first match's place."""
        return self._rows("cases")

    @property
    def case_count(self) -> int | None:
        return self.raw.get("case_count")

    @property
    def funnel(self) -> list[JSON]:
        """``RETURN funnel``: per step, the cases (or windows) that reached it and its conversion time."""
        return self._rows("funnel")

    @property
    def next(self) -> list[JSON]:
        """``RETURN next k``: per offset and type, the matches that event follows and the time to it."""
        return self._rows("next")

    @property
    def durations(self) -> list[JSON]:
        """``RETURN durations``: per pair of consecutive steps (and first to last), the gaps' distribution."""
        return self._rows("durations")

    @property
    def groups(self) -> list[JSON]:
        """``RETURN count BY`` / ``cases BY``: the top values and their counts (the rest: ``raw["other"]``)."""
        return self._rows("groups")

    def _rows(self, kind: str) -> list[JSON]:
        if self.table is not None:
            if self.raw.get("rows") != kind:
                return []
            from exact.engine.answer_columns import rows_json

            return rows_json(self.table)
        return list(self.raw.get(kind) or [])

    @property
    def exists(self) -> bool:
        return bool(self.raw.get("exists"))

    @property
    def count(self) -> int | None:
        return self.raw.get("count")

    @property
    def matches(self) -> list[JSON]:
        return self._rows("matches")

    @property
    def intervals(self) -> list[JSON]:
        return self._rows("intervals")

    @property
    def stats(self) -> JSON:
        return dict(self.raw.get("stats") or {})

    @property
    def truncated(self) -> bool:
        return bool(self.raw.get("truncated"))

    def summary(self) -> str:
        """The answer's size for people: ``12 matches``, or ``more than 5 matches`` when a ``limit`` stopped
        the search (the count is then unknown; ``RETURN count`` counts them all)."""
        if self.count is not None:
            return f"{self.count:,} match{'' if self.count == 1 else 'es'}"
        if self.truncated and self.table is not None and self.raw.get("rows") == "matches":
            return f"more than {self.table.num_rows:,} matches"
        if self.truncated and self.matches:
            return f"more than {len(self.matches):,} matches"
        return "at least one match" if self.exists else "no match"

    @property
    def mode(self) -> str | None:
        return self.raw.get("mode")

    @property
    def index_version(self) -> int | None:
        return self.raw.get("index_version")

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]


def _table_of_json(raw: JSON) -> Any:
    """A JSON answer's rows as a ``pyarrow.Table`` in the columns of docs/contract.md §3.6 (per-variable
    times are not in a JSON answer: only ``<var>.seq``)."""
    import pyarrow as pa

    summary = next((k for k in ("funnel", "next", "durations", "groups") if k in raw), None)
    if summary is not None:  # (a summary's rows, docs/contract.md §3.7)
        return pa.Table.from_pylist(list(raw[summary])) if raw[summary] else pa.table({})
    kind = next((k for k in ("matches", "cases", "intervals") if k in raw), None)
    if kind is None:
        return pa.table({"exists": pa.array([bool(raw.get("exists"))]),
                         "count": pa.array([raw.get("count")], pa.int64())})
    rows: list[JSON] = list(raw[kind])
    ts = pa.timestamp("us", tz="UTC")

    def times(key: str) -> Any:
        texts = [r.get(key) for r in rows]
        return pa.array([None if t is None else dt.datetime.fromisoformat(t) for t in texts], ts)

    columns: dict[str, Any] = {}
    if kind == "cases":
        columns["case"] = pa.array([r["case"] for r in rows])
        columns["matches"] = pa.array([r["matches"] for r in rows], pa.int64())
    columns["start_seq"] = pa.array([r["start_seq"] for r in rows], pa.int64())
    columns["end_seq"] = pa.array([r["end_seq"] for r in rows], pa.int64())
    columns["start_ts"], columns["end_ts"] = times("start_ts"), times("end_ts")
    if kind == "matches":
        if any("case" in r for r in rows):
            columns["case"] = pa.array([r.get("case") for r in rows])
        names = list(dict.fromkeys(n for r in rows for n in r["bindings"]))
        for n in names:
            bound = [r["bindings"].get(n) for r in rows]
            single = all(b is None or len(b) == 1 for b in bound)
            columns[f"{n}.seq"] = (pa.array([None if b is None else b[0] for b in bound], pa.int64()) if single
                                   else pa.array(bound, pa.list_(pa.int64())))
    return pa.table(columns)

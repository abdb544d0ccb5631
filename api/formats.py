"""An answer's forms at the doors: an Arrow stream, JSON lines, and Parquet, CSV or JSON-lines files.

A columnar answer (``columnar=True`` in :mod:`api.service.queries`) carries its rows — matches, cases or
intervals — as one Arrow table under ``rows``; every other field is the answer's head.  The forms here
(docs/contract.md §3.6):

* **Arrow stream** (``application/vnd.apache.arrow.stream``): the rows table, its schema's metadata holding
  the head as JSON under ``seqsketch.answer``.
* **JSON lines** (``application/x-ndjson``): the head on the first line, then one row object per line, in
  the same form as the JSON answer's ``matches``, ``cases`` or ``intervals``, made batch by batch.
* **Files** (``seqsketch query --out``): the rows as Parquet, CSV (list columns as JSON text) or JSON lines.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from exact import jsontext
from exact.engine.answer_columns import rows_json
from exact.errors import InputError

ARROW_STREAM = "application/vnd.apache.arrow.stream"
NDJSON = "application/x-ndjson"
#: the schema metadata key of an Arrow answer's head
HEAD_KEY = b"seqsketch.answer"
#: rows per JSON-lines batch
_BATCH = 8192
#: what ``--out`` writes, by file suffix
OUT_SUFFIXES = (".parquet", ".csv", ".jsonl", ".ndjson")


#: the rows of the answers summarised from every match (docs/contract.md §3.7), by their key
SUMMARY_ROWS = ("funnel", "next", "durations", "groups")


def split_answer(answer: dict[str, Any]) -> tuple[dict[str, Any], pa.Table]:
    """An answer's head (every field but its rows; ``rows`` names what they are: ``matches``, ``cases``,
    ``intervals``, a summary's ``funnel``, ``next``, ``durations`` or ``groups``, or ``summary``) and its
    rows as a table — the columnar ``rows``; an answer without them
    (approximate candidates; ``RETURN count`` or ``exists``) gives its ``intervals`` as rows, or one row of
    ``exists`` and ``count``."""
    head = {k: v for k, v in answer.items() if k != "rows"}
    rows = answer.get("rows")
    if isinstance(rows, pa.Table):
        head["rows"] = rows_kind(rows)
        return head, rows
    for key in ("matches", "cases", "intervals", *SUMMARY_ROWS):
        if key in head:
            listed = head.pop(key)
            head["rows"] = key
            return head, pa.Table.from_pylist(listed) if listed else pa.table({})
    head["rows"] = "summary"
    return head, pa.table({"exists": pa.array([bool(head.get("exists"))]),
                           "count": pa.array([head.get("count")], pa.int64())})


def rows_kind(rows: pa.Table) -> str:
    """What a columnar answer's rows are, from their columns."""
    names = rows.column_names
    if "matches" in names:
        return "cases"
    if any(c.endswith(".seq") for c in names):
        return "matches"
    return "intervals" if "start_seq" in names or not names else "summary"


def arrow_stream(answer: dict[str, Any]) -> bytes:
    """The answer as an Arrow IPC stream (see the module docstring)."""
    head, rows = split_answer(answer)
    meta = dict(rows.schema.metadata or {})
    meta[HEAD_KEY] = jsontext.dumps(head, ensure_ascii=False).encode("utf-8")
    rows = rows.replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    return bytes(sink.getvalue().to_pybytes())


def json_lines(answer: dict[str, Any]) -> Iterator[bytes]:
    """The answer as JSON lines: its head, then one row per line (see the module docstring)."""
    head, rows = split_answer(answer)
    yield (jsontext.dumps(head, ensure_ascii=False) + "\n").encode("utf-8")
    for start in range(0, rows.num_rows, _BATCH):
        batch = rows_json(rows.slice(start, _BATCH))
        yield "".join(jsontext.dumps(row, ensure_ascii=False) + "\n" for row in batch).encode("utf-8")


def write_rows(answer: dict[str, Any], path: str | Path) -> int:
    """Write the answer's rows to ``path`` by its suffix (see :data:`OUT_SUFFIXES`); returns the rows
    written.  The file appears whole or not at all (written beside it, then renamed)."""
    target = check_out_path(path)
    suffix = target.suffix.lower()
    _, rows = split_answer(answer)
    partial = target.with_name(f".{target.name}.partial")
    try:
        if suffix == ".parquet":
            pq.write_table(rows, partial)
        elif suffix == ".csv":
            pacsv.write_csv(_flat(rows), partial)
        else:
            with open(partial, "wb") as out:
                for start in range(0, rows.num_rows, _BATCH):
                    out.write("".join(jsontext.dumps(row, ensure_ascii=False) + "\n"
                                      for row in rows_json(rows.slice(start, _BATCH))).encode("utf-8"))
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return rows.num_rows


def check_out_path(path: str | Path) -> Path:
    """``path`` when rows can be written there (a known suffix, an existing directory), else a clear error."""
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix not in OUT_SUFFIXES:
        raise InputError(f"cannot tell the file format of {str(path)!r} from its suffix {suffix or '(none)'!r}; "
                         f"use one of {', '.join(OUT_SUFFIXES)}", where="--out")
    if not target.parent.is_dir():
        raise InputError(f"cannot write {str(path)!r}: the directory {str(target.parent)!r} does not exist",
                         where="--out")
    return target


def _flat(rows: pa.Table) -> pa.Table:
    """``rows`` with its list and struct columns as JSON text (CSV holds scalars only)."""
    for i, field in enumerate(rows.schema):
        if pa.types.is_list(field.type) or pa.types.is_struct(field.type):
            texts = [None if v is None else jsontext.dumps(v, ensure_ascii=False, default=str)
                     for v in rows.column(i).to_pylist()]
            rows = rows.set_column(i, field.name, pa.array(texts, pa.string()))
    return rows

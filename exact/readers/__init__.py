"""Readers: input files → batches of stream tables (no ``seq``; ingest orders and numbers them).

Formats (docs/contract.md §1):

``xes`` (``.xes``, ``.xes.gz``)
    Streamed with the expat parser that ``xml.etree`` is built on, fed 1 MiB at a time: no element tree is
    built at all, so memory stays at one batch whatever the log's size, and every error can name its line.
    type = ``concept:name``, ts = ``time:timestamp``; the trace's ``concept:name`` becomes attribute ``case``;
    every other attribute of the event and of its trace is kept, typed by its XES element (``int``, ``float``,
    ``boolean``, ``string``/``id``, ``date`` → ISO-8601 UTC text).  An event attribute wins over a trace
    attribute of the same key.  Nested attributes (children of an attribute element), ``list``/``container``
    values and log-level attributes and globals are not event data and are skipped.
``csv`` / ``jsonl`` / ``parquet``
    ``--type-field`` (default ``type``) and ``--time-field`` (default ``ts``) name the two fields; every other
    field becomes an attribute.  A field named ``seq`` is ignored: ``seq`` is always assigned at ingest.
    CSV values are inferred per column over the whole file: int64 if every non-empty value is an integer, else
    double if every one is a number, else bool if every one is ``true``/``false`` (any case), else string; an
    empty cell is null.  JSON values keep their JSON type (objects and arrays become compact JSON text); a
    record may also carry its attributes in an ``attrs`` object.  Parquet columns keep their type (integers →
    int64, floats → double, dates and timestamps → ISO text, anything else → text); a struct column ``attrs``
    is unpacked, so a stream written by the store reads back as itself.
``text``
    Each whitespace-separated token is one event whose type is the token.  Its ts is its position: token ``i``
    (0-based, counted over the whole input) is at ``1970-01-01T00:00:00Z + i`` seconds (plus an optional
    origin, so several text inputs continue one another).  A ``word/tag`` token keeps the word, the part
    before the last ``/``.  A ``.zip`` archive is read member by member in name order, skipping directories
    and the documentation members that corpus archives carry (``README*``, ``LICENSE*``, ``CONTENTS*``,
    ``cats.txt``).  A ``.gz`` file is decompressed.

Timestamps in CSV, JSON and Parquet text: ISO-8601, with an offset or ``Z``; **text without a zone is taken
as UTC**.  Numbers (and numeric text) are **seconds since the Unix epoch**, fractions allowed.

Every malformed record raises :class:`~exact.errors.InputError` naming the file, the line (XES, CSV, JSON
Lines, text) or record (Parquet, 1-based) and the field.

One module per format family: :mod:`~exact.readers.xes`, :mod:`~exact.readers.tabular` (CSV, JSON Lines,
Parquet), :mod:`~exact.readers.text`; what they share is :mod:`~exact.readers.common`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from exact.errors import InputError
from exact.readers.common import BATCH_ROWS, DEFAULT_TIME_FIELD, DEFAULT_TYPE_FIELD, ReadOptions
from exact.readers.tabular import read_csv, read_jsonl, read_parquet
from exact.readers.text import read_text, word_of
from exact.readers.xes import read_xes

__all__ = ["BATCH_ROWS", "DEFAULT_TIME_FIELD", "DEFAULT_TYPE_FIELD", "FORMATS", "ReadOptions",
           "detect_format", "read_events", "word_of"]

FORMATS = ("xes", "csv", "jsonl", "parquet", "text")


def detect_format(path: str | Path) -> str:
    """The format of ``path`` by its extension (``--format auto``)."""
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    for suffix, fmt in ((".xes", "xes"), (".csv", "csv"), (".jsonl", "jsonl"), (".ndjson", "jsonl"),
                        (".json", "jsonl"), (".parquet", "parquet"), (".pq", "parquet"), (".txt", "text"),
                        (".zip", "text")):
        if name.endswith(suffix):
            return fmt
    raise InputError(f"cannot tell the format from the extension; pass --format one of {', '.join(FORMATS)}",
                     where=str(path))


def read_events(path: str | Path, fmt: str = "auto",
                options: ReadOptions | None = None) -> Iterator[pa.Table]:
    """Stream the events of one input as stream tables without ``seq``, in input order (an input on object
    storage, ``s3://bucket/key``, is fetched to a temporary local copy, read, and the copy deleted)."""
    from exact.readers.sources import is_remote, local_copy

    if is_remote(path):
        import shutil
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="seqsketch-input-"))
        try:
            yield from read_events(local_copy(path, folder), fmt if fmt != "auto" else detect_format(path),
                                   options)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    path = Path(path)
    options = options or ReadOptions()
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}; expected one of auto, {', '.join(FORMATS)}",
                         where=str(path))
    if not path.is_file():
        raise InputError("no such file", where=str(path))
    reader = {"xes": read_xes, "csv": read_csv, "jsonl": read_jsonl, "parquet": read_parquet,
              "text": read_text}[fmt]
    yield from reader(path, options)

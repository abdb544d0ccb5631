"""How many events an input holds, estimated before it is read — for planning a build's memory.

Parquet files say it in their footer (exact).  For the others, the first :data:`SAMPLE_BYTES` of the
(decompressed) records are read and counted — lines of CSV (after the header) and JSON Lines, ``<event``
elements of XES (from the first trace on: a log's metadata comes first), whitespace tokens of text — and
scaled to the whole input by the share of the file the sample covered (for gzip, of the compressed bytes
consumed; for a zip archive, of its members' uncompressed sizes).  An input smaller than the sample is
counted exactly.  Reading the sample costs milliseconds; an estimate of a file whose first part is not
typical of the rest is off by as much.
"""

from __future__ import annotations

import re
import zipfile
import zlib
from pathlib import Path

import pyarrow.parquet as pq

from exact.readers.sources import is_remote, open_source, parquet_source, source_size

#: Bytes of (decompressed) records read to estimate an input's events; more is read to get past a long
#: header (an XES log's metadata can run to megabytes before its first trace), up to :data:`MAX_SAMPLE`.
SAMPLE_BYTES = 4 << 20
MAX_SAMPLE = 64 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_BLOCK = 1 << 16
_EVENT = re.compile(rb"<event[\s>/]")


def estimate_events(path: str | Path, fmt: str) -> int:
    """The estimated number of events of input ``path`` in format ``fmt`` (see the module docstring)."""
    remote = is_remote(path)
    path = str(path) if remote else Path(path)
    if fmt == "parquet":
        try:
            return int(pq.ParquetFile(parquet_source(path)).metadata.num_rows)
        except Exception:  # unreadable: the reader will say so
            return 0
    if fmt == "text" and str(path).lower().endswith(".zip"):
        return 0 if remote else _zip_tokens(Path(path))
    marker = {"xes": b"<trace", "csv": b"\n"}.get(fmt)
    data, covered, whole = _sample(path, marker)
    body = _body(data, marker)
    records = _records(data[body:], fmt)
    if whole or len(data) <= body:
        return records
    total = len(data) / max(covered, 1e-9)  # the decompressed size, as far as the sample tells
    return int(records * (total - body) / (len(data) - body))


def _body(data: bytes, marker: bytes | None) -> int:
    """Where the records start: after the CSV header's line end, at an XES log's first trace."""
    if marker is None:
        return 0
    at = data.find(marker)
    if at < 0:
        return len(data)
    return at + len(marker) if marker == b"\n" else at


def _sample(path: str | Path, marker: bytes | None) -> tuple[bytes, float, bool]:
    """The first bytes of the file's (gunzipped) text — :data:`SAMPLE_BYTES` past ``marker`` — the share of
    the file's bytes they cover, and whether they are the whole file."""
    size = max(source_size(path), 1)
    out = bytearray()
    consumed = 0
    body = 0 if marker is None else None
    with open_source(path) as f:
        compressed = f.read(2) == _GZIP_MAGIC
        f.seek(0)
        inflate = zlib.decompressobj(wbits=31) if compressed else None
        while (body is None or len(out) - body < SAMPLE_BYTES) and len(out) < MAX_SAMPLE:
            block = f.read(_BLOCK)
            if not block:
                return bytes(out), 1.0, True
            consumed += len(block)
            before = len(out)
            if inflate is None:
                out += block
            else:
                try:
                    out += inflate.decompress(block)
                except zlib.error:  # damaged: the reader will say so; estimate from what was read
                    break
            if body is None and marker is not None:  # (body is None only while a marker is sought)
                at = out.find(marker, max(0, before - len(marker)))
                body = None if at < 0 else at
            if inflate is not None and inflate.eof:
                return bytes(out), 1.0, True
    return bytes(out), min(1.0, consumed / size), consumed >= size


def _records(sample: bytes, fmt: str) -> int:
    if fmt == "xes":
        return len(_EVENT.findall(sample))
    if fmt == "text":
        return len(sample.split())
    return sample.count(b"\n") + (1 if sample and not sample.endswith(b"\n") else 0)


def _zip_tokens(path: Path) -> int:
    try:
        with zipfile.ZipFile(path) as archive:
            members = [m for m in archive.infolist() if not m.is_dir()]
            total = sum(m.file_size for m in members)
            sample = b""
            for m in members:
                with archive.open(m) as f:
                    sample += f.read(SAMPLE_BYTES - len(sample))
                if len(sample) >= SAMPLE_BYTES:
                    break
    except (OSError, zipfile.BadZipFile):  # the reader will say what is wrong
        return 0
    tokens = _records(sample, "text")
    return tokens if len(sample) >= total else int(tokens * total / max(len(sample), 1))

"""An event-store part's Parquet file: opened with its footer kept (parts never change once written), read by
row groups — from the disk, or by ranges from object storage for a replica's part not held — and refused as
:class:`~exact.errors.StoreCorrupt` when its size, checksums or row counts disagree with the manifest
(:class:`PartMissing` when it is not there at all)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from exact.errors import NotFound, StoreCorrupt, out_of_resources
from exact.events import ATTRS, TYPE
from exact.store.fetch import Ranged, ranged, refetch
from exact.store.manifest import PartInfo

#: Footers of the parts read lately, by (path, size, mtime, inode): parts never change once written, and
#: parsing a footer costs about as much as decoding a few row groups.
_FOOTERS: dict[tuple[str, int, int, int], pq.FileMetaData] = {}
_FOOTERS_MAX = 256
_FOOTERS_LOCK = threading.Lock()



def open_part(path: Path, *, verify: bool = True) -> pq.ParquetFile:
    """A part file opened for reading, its footer parsed once per process.  ``type`` is read
    dictionary-encoded (a part stores it so; decoding to strings per row group costs more than one cast of
    the result).  ``verify`` checks the pages' CRCs as they are read."""
    st = path.stat()
    return _with_footer((str(path), st.st_size, st.st_mtime_ns, st.st_ino), path, verify)


def _open_ranged_part(path: Path, remote: Ranged) -> pq.ParquetFile:
    """A replica's part not held, opened over ranged reads of its object: its footer fetched once per process,
    then only the column chunks of the row groups a read asks for."""
    return _with_footer((str(path), -1, 0, 0), remote.files.open(remote.key), True)


def _with_footer(key: tuple[str, int, int, int], source: Any, verify: bool) -> pq.ParquetFile:
    """``source`` opened as a Parquet file with the footer kept under ``key`` (parsed and kept on a miss)."""
    with _FOOTERS_LOCK:
        meta = _FOOTERS.get(key)
    pf = pq.ParquetFile(source, metadata=meta, page_checksum_verification=verify, read_dictionary=[TYPE])
    if meta is None:
        with _FOOTERS_LOCK:
            if len(_FOOTERS) >= _FOOTERS_MAX:
                _FOOTERS.pop(next(iter(_FOOTERS)))
            _FOOTERS[key] = pf.metadata
    return pf


class PartMissing(StoreCorrupt):
    """A part named by a snapshot is not on disk (damage, or a dataset replaced under its reader)."""


def read_part(path: Path, part: PartInfo, groups: list[int], cols: list[str],
               names: tuple[str, ...] | None = None) -> pa.Table:
    """Row groups of one part (only the attributes ``names`` of ``attrs``, unless None); a part whose size
    differs from the manifest's, whose pages fail their checksums or that cannot be decoded is
    :class:`StoreCorrupt`, never returned."""
    try:
        remote = None
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            remote = ranged(path)  # (a replica's part not held: read by ranges, through the block cache)
            if remote is None:
                raise
            try:
                size = remote.files.size(remote.key)
            except NotFound:
                raise FileNotFoundError(str(path)) from None
        if remote is None and part.bytes and size != part.bytes and refetch(path):  # (a damaged copy: again)
            size = path.stat().st_size
        if part.bytes and size != part.bytes:
            raise StoreCorrupt(f"damaged event-store part: {size} bytes, the manifest says {part.bytes}",
                               where=str(path))
        pf = open_part(path) if remote is None else _open_ranged_part(path, remote)
        file_cols = []
        for c in cols:
            if c != ATTRS:
                file_cols.append(c)
            elif ATTRS in pf.schema_arrow.names:
                if names is None:
                    file_cols.append(c)
                else:  # only the fields asked for that this part has (the others read as null)
                    present = {f.name for f in pf.schema_arrow.field(ATTRS).type}
                    file_cols.extend(f"{ATTRS}.{n}" for n in names if n in present)
        table = pf.read_row_groups(groups, columns=file_cols)
    except FileNotFoundError:
        raise PartMissing("event-store part is missing", where=str(path)) from None
    except (pa.ArrowException, OSError, ValueError) as err:
        exhausted = out_of_resources(err)
        if exhausted is not None:  # (the process is out of files or memory: the part is not to blame)
            raise exhausted from err
        raise StoreCorrupt(f"damaged event-store part: {err}", where=str(path)) from None
    if table.num_rows != sum(part.row_groups[g][1] - part.row_groups[g][0] + 1 for g in groups):
        raise StoreCorrupt("damaged event-store part: row counts differ from the manifest", where=str(path))
    return table

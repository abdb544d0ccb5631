"""The index file's layout: its constants, and where a tree's sections and header go.

One index version is one file (:mod:`sketch.persist` writes, maps and verifies it): a 64-byte prefix, the
sections (numpy arrays, each on a 64-byte boundary) and a JSON header naming every section's dtype, shape,
extent and SHA-256.  :func:`lay_out` places the sections a tree is stored as
(:meth:`~sketch.tree.bloomtree.BloomTree.stored_form`) and writes the header; :func:`file_size` is the size
of the file without hashing anything, so a tree knows its stored size without the writer.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

MAGIC = b"SQSKTREE"
FORMAT_NAME = "seqsketch.bloomtree"
FORMAT_VERSION = 1
ALIGN = 64
PREFIX = struct.Struct("<8sIIQQI")
#: The sections, in file order, with their dtypes.
COLUMNS = (("level", "|i1"), ("log2", "|i1"), ("leaf_ts", "<i8"), ("bits", "|u1"), ("open_bits", "|u1"),
           ("open_positions", "<u4"))
#: How an open node's unfolded bits are kept: they are its stored bits (stored unfolded), m/8 bytes in
#: ``open_bits``, or a list of set positions in ``open_positions`` (a sparse node).
IN_POOL, DENSE, SPARSE = 0, 1, 2

_NO_HASH = "0" * 64


def pad(n: int) -> int:
    """Bytes of padding after ``n`` bytes, up to the next 64-byte boundary."""
    return -n % ALIGN


def lay_out(arrays: Sequence[tuple[str, np.ndarray]], head: Mapping[str, Any], digest: str | None
            ) -> tuple[bytes, int]:
    """The header of a file of the sections ``arrays`` (name, data, in :data:`COLUMNS` order) and the header
    fields ``head``, and the header's offset (where the sections end).  Sections are hashed and the tree's
    ``digest`` recorded when one is given; without, both are zeros (the same length: for sizing)."""
    offset = ALIGN
    sections = []
    for name, data in arrays:
        raw = data.data if data.size else b""
        sections.append({"name": name, "dtype": data.dtype.str, "shape": list(data.shape), "offset": offset,
                         "length": data.nbytes,
                         "sha256": hashlib.sha256(raw).hexdigest() if digest is not None else _NO_HASH})
        offset += data.nbytes + pad(data.nbytes)
    header = json.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION, **head,
                         "index_digest": digest if digest is not None else _NO_HASH, "sections": sections},
                        sort_keys=True).encode()
    return header, offset


def file_size(arrays: Sequence[tuple[str, np.ndarray]], head: Mapping[str, Any]) -> int:
    """The size of the file :func:`lay_out` lays out, without hashing anything."""
    header, offset = lay_out(arrays, head, None)
    return offset + len(header)

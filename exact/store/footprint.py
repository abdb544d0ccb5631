"""The footprint budget: which attribute columns and value indexes a part's seek file keeps, so that the whole
dataset stays within a multiple of its Parquet parts (``build --footprint``; docs/attribute-index.md).
"""

from __future__ import annotations

from typing import Any


def within(costed: list[Any], indexes: dict[str, dict[str, bytes]], allowance: int
            ) -> tuple[list[Any], list[str], dict[str, dict[str, bytes]]]:
    """The attributes of ``costed`` whose columns fit ``allowance`` bytes (the cheapest as written first), the
    names of the others, and the value indexes of those kept that fit in what is left (cheapest first)."""
    spent, kept, dropped = 0, [], []
    for item in sorted(costed, key=lambda c: (sum(map(len, c[4].values())), c[1])):
        size = sum(map(len, item[4].values()))
        if spent + size <= allowance:
            spent += size
            kept.append(item)
        else:
            dropped.append(item[1])
    names = {item[1] for item in kept}
    fitting: dict[str, dict[str, bytes]] = {}
    for name, index in sorted(((n, x) for n, x in indexes.items() if n in names),
                              key=lambda nx: (sum(map(len, nx[1].values())), nx[0])):
        size = sum(map(len, index.values()))
        if spent + size <= allowance:
            spent += size
            fitting[name] = index
    return sorted(kept, key=lambda c: c[2]), dropped, fitting


def seek_allowance(footprint: float, parquet_bytes: int, base_bytes: int, reserve: int | None = None) -> int:
    """The bytes a part's attribute sections may take under a footprint budget: the whole dataset within
    ``footprint`` times its Parquet parts — less the part's ``parquet_bytes`` itself, its seek file's sections
    that are not attributes (``base_bytes``: types, times, rows by type), and the part's share of the trees
    and the partition layout (``reserve``; None, not known yet: :data:`TREE_SHARE` of its Parquet bytes) —
    and never less than :data:`MIN_ALLOWANCE`."""
    kept = int(TREE_SHARE * parquet_bytes) if reserve is None else reserve
    return max(MIN_ALLOWANCE, int((footprint - 1.0) * parquet_bytes) - base_bytes - kept)


#: The bytes a part's attributes may take whatever the footprint budget: the budget guards the disk of large
#: datasets, and a short part's few kilobytes (where the trees and Parquet's own metadata alone outweigh its
#: events) are not worth a slower question.
MIN_ALLOWANCE = 64 << 10
#: The share of the Parquet parts' bytes a footprint budget keeps for the trees and a partition layout when
#: their size is not known yet (a build: its parts are written before its trees on Spark, and a local build
#: chooses as Spark does).  Measured: the stream tree 0.05 (ACER-like) to 0.06 (BPI 2012), the partition tree
#: and layout 0.37 more on BPI 2012.
TREE_SHARE = 0.25
#: The footprint budget of a dataset whose build names none: the whole dataset within this many times its
#: Parquet parts (see docs/attribute-index.md for how it was chosen).
DEFAULT_FOOTPRINT = 4.0

"""What ``info`` says of a dataset's store beside its events and index: the attributes served in place
(``attr_index``), the bytes on disk by structure (``footprint``) — and what a process holds of the store's
files, dropped as a new process would hold none (:func:`forget_open_files`)."""

from __future__ import annotations

from typing import Any

from exact.store.manifest import INDEX_ATTRS_KEY, Snapshot
from sketch.index_files import LOADED
from sketch.tree.decay import DECAY_KEY


def forget_open_files() -> None:
    """Drop what this process holds of the files it opened — trees, seek files, layouts, Parquet footers — as
    a new server process holds nothing (a benchmark's first question, a test of what a cold reader does)."""
    from exact.store import grouping, parts, seek

    LOADED._trees.clear()
    LOADED._file_events.clear()
    seek._OPEN.clear()
    grouping._LOADED.clear()
    parts._FOOTERS.clear()


def attr_index_section(snap: Snapshot) -> dict[str, Any]:
    """The ``attr_index`` section of ``info``: the attributes the seek files serve in place for conditions
    (per attribute its bytes and the parts serving it), those chosen at build (``index_attrs``; None: the
    cheapest within the default budget), and the seek files' bytes in all (ts, types, the rows by type and
    the attributes)."""
    served: dict[str, dict[str, int]] = {}
    for part in snap.parts:
        for attr, size in part.seek_attrs:
            entry = served.setdefault(attr, {"bytes": 0, "parts": 0})
            entry["bytes"] += size
            entry["parts"] += 1
    chosen = (snap.extra or {}).get(INDEX_ATTRS_KEY)
    return {"chosen": chosen, "attributes": dict(sorted(served.items())),
            "unserved": sorted(a for a in snap.attrs if a not in served), "parts": len(snap.parts),
            "seek_bytes": sum(p.seek_bytes for p in snap.parts)}


def footprint_section(snap: Snapshot, index: dict[str, Any] | None) -> dict[str, Any]:
    """The ``footprint`` section of ``info``: the bytes the dataset takes by structure — the Parquet parts
    (``parts``), the seek files' ``types``, ``times``, ``rows_by_type``, attribute ``values`` and
    ``value_indexes`` and their ``seek_headers`` (parts written before these were recorded: ``seek_files``
    whole), the stream ``tree``, the ``partition_tree`` and its ``layout``, the ``decayed`` summary — each
    with its ratio to the parts, and the whole (``bytes``, ``ratio``)."""
    sizes: dict[str, int] = {"parts": sum(p.bytes for p in snap.parts)}
    for part in snap.parts:
        if part.seek_sections:
            for key, n in part.seek_sections:
                name = "seek_headers" if key == "header" else key
                sizes[name] = sizes.get(name, 0) + n
        elif part.seek_bytes:
            sizes["seek_files"] = sizes.get("seek_files", 0) + part.seek_bytes
    if index is not None:
        sizes["tree"] = int(index.get("bytes", 0))
        if "partition" in index:
            sizes["partition_tree"] = int(index["partition"].get("bytes", 0))
            sizes["layout"] = int(index["partition"].get("layout_bytes", 0))
    decay = (snap.extra or {}).get(DECAY_KEY)
    if decay:
        sizes["decayed"] = int(decay.get("bytes", 0))
    base = max(sizes["parts"], 1)
    total = sum(sizes.values())
    return {"bytes": total, "ratio": round(total / base, 3),
            "structures": {k: {"bytes": v, "ratio": round(v / base, 3)} for k, v in sizes.items()}}

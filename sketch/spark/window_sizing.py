"""A Spark build's index sized from what its windows saw — their distinct (leaf, type) pairs, as the local
build sizes it from the events (Baltus 2021 §4.4, :func:`sketch.build.plan`) — and the built tree held to the memory
budget, since sizing is an estimate."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from exact.errors import SeqsketchError
from sketch.build import BuildOptions
from sketch.sizing import Sizing, measure_distinct, size_index


def size_from_windows(windows: Sequence[Mapping[str, Any]], events: int, options: BuildOptions) -> Sizing:
    """Baltus 2021 §4.4 sizing from the windows' distinct (leaf, type) pairs, as :func:`sketch.build.plan` sizes it
    from events."""
    codes_of: dict[str, int] = {}
    leaf_ids, codes = [], []
    for w in windows:
        vocabulary = json.loads(w["vocabulary"])
        width = max(len(vocabulary), 1)
        pairs = np.frombuffer(w["pairs"], dtype="<i8")
        mapping = np.asarray([codes_of.setdefault(t, len(codes_of)) for t in vocabulary] or [0], np.int64)
        leaf_ids.append(w["first_leaf"] + pairs // width)
        codes.append(mapping[pairs % width])
    expected = options.expected_events if options.expected_events is not None else events
    if expected < events:
        raise SeqsketchError(f"expected_events ({expected}) is smaller than the {events} events given")
    profile = measure_distinct(np.concatenate(leaf_ids), np.concatenate(codes), options.leaf_size,
                               options.fanout)
    return size_index(fpq=options.fpq, leaf_size=options.leaf_size, events=max(expected, 1), profile=profile,
                      memory_bytes=options.memory_bytes, query_length=options.query_length,
                      fanout=options.fanout, fold=options.fold)

"""The build's ``DataFrame → DataFrame`` steps on Spark; the task bodies live with what they do.

1. :func:`stage_inputs` — one task per input piece reads it with the project's reader and stages sorted
   chunks (:mod:`sketch.spark.read`): a row per chunk (its rows, types, time range, time samples) and per
   piece (what it found, or its error).
2. :func:`write_windows` — one task per window merges its slices of the chunks into stream order, writes
   them as event-store parts and answers its leaves' (leaf, type) pairs and time ranges, and their bits when
   the tree's configuration is known (:mod:`sketch.spark.sample_sort`).
3. :func:`build_leaf_bits` — for a new tree, sized by the driver from every window's pairs: one task per
   window turns its pairs into its leaves' filter bits (:func:`sketch.spark.leaves.leaf_bits`).

Data moves between the steps through the staging directory and the store (shared storage), never through a
Spark shuffle: the driver collects only summaries, samples, pairs and bits.  :mod:`sketch.spark.job` runs
the steps.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from sketch.spark.leaves import leaf_bits
from sketch.spark.read import stage_inputs
from sketch.spark.sample_sort import write_windows
from sketch.tree import TreeConfig

__all__ = ["build_leaf_bits", "leaf_inputs", "stage_inputs", "write_windows"]

BITS_SCHEMA = "window BIGINT, bits BINARY"
_BITS_ARROW = pa.schema([("window", pa.int64()), ("bits", pa.binary())])


def build_leaf_bits(spark: Any, windows: Any, count: int, config: TreeConfig) -> Any:
    """``DataFrame → DataFrame``: each window's leaf bits (``window``, ``bits``) from ``windows``, a
    broadcast list of ``(window, vocabulary, pairs, leaves)`` (:func:`leaf_inputs`; a few bytes a leaf) —
    one task per core, each for its share of the windows."""
    tasks = max(1, min(count, spark.sparkContext.defaultParallelism))  # little work each: one task per core
    return spark.range(0, max(1, count), 1, numPartitions=tasks).mapInArrow(_BitsTask(config, windows),
                                                                             BITS_SCHEMA)


def leaf_inputs(windows: Sequence[Mapping[str, Any]]) -> list[tuple[int, str, bytes, int]]:
    """What :func:`build_leaf_bits` needs of the windows' answer rows."""
    return [(w["window"], w["vocabulary"], w["pairs"], w["leaves"]) for w in windows]


@dataclass(frozen=True)
class _BitsTask:
    config: TreeConfig
    windows: Any  # a Broadcast of (window, vocabulary, pairs, leaves)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                window, vocabulary, pairs, leaves = self.windows.value[index]
                pairs = np.frombuffer(pairs, dtype="<i8")
                bits = leaf_bits(self.config, json.loads(vocabulary), pairs, leaves)
                yield pa.RecordBatch.from_pydict({"window": [window], "bits": [bits]}, schema=_BITS_ARROW)

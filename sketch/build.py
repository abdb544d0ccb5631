"""The in-process builder: size the tree from the data (Baltus 2021 §4.4), then build it (Alg. 1 and 2).

``build_tree(types, ts)`` is what ``seqsketch build --engine local`` runs after ingest.  Sizing measures what
the thesis asks the user to guess (ch. 6): ``N`` is the stream's length (or ``expected_events`` when more data
is expected through appends) and the distinct-type profile per tree level is counted from the data
(:func:`sketch.sizing.measure_distinct`) rather than taken from Heaps' law.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from exact.errors import SeqsketchError
from sketch.sizing import Sizing, measure_distinct, size_index
from sketch.tree import BloomTree, TreeConfig, encode_types, leaf_type_pairs
from sketch.tree.bits import as_micros

#: Default leaf size C (the thesis used 100): at fpq 1e-3 the bpic2012 index is about 4 % of its event store.
DEFAULT_LEAF_SIZE = 256
DEFAULT_FPQ = 1e-3
DEFAULT_FANOUT = 2


@dataclass(frozen=True)
class BuildOptions:
    """What a user may ask of a build (``--leaf-size``, ``--fpq``, ``--memory``, ``--index-attrs``) and the other
    inputs of Baltus 2021 §4.4."""

    leaf_size: int = DEFAULT_LEAF_SIZE
    fpq: float = DEFAULT_FPQ
    memory_bytes: int | None = None
    fanout: int = DEFAULT_FANOUT
    query_length: int = 2
    fold: bool = True
    expected_events: int | None = None
    #: The attributes the store's seek files serve in place (``--index-attrs``; ``()``: none); None: the
    #: cheapest within the default budget (:mod:`exact.store.seek_attrs`).
    index_attrs: tuple[str, ...] | None = None
    #: The footprint budget (``--footprint``): the whole dataset within this many times its Parquet parts,
    #: the attributes served and their value indexes chosen to fit; None: the default
    #: (:data:`exact.store.footprint.DEFAULT_FOOTPRINT`).
    footprint: float | None = None


#: The options of a build that specifies nothing.
DEFAULT_OPTIONS = BuildOptions()


def plan(types: pa.Array | pa.ChunkedArray | Sequence[str] | np.ndarray,
         options: BuildOptions = DEFAULT_OPTIONS) -> Sizing:
    """Measure the stream and solve the sizing equations for it (without building)."""
    codes, vocabulary = encode_types(types)
    return _plan(codes, len(vocabulary), options)


def _plan(codes: np.ndarray, vocabulary_size: int, options: BuildOptions,
          pairs: np.ndarray | None = None) -> Sizing:
    events = len(codes)
    expected = options.expected_events if options.expected_events is not None else events
    if expected < events:
        raise SeqsketchError(f"expected_events ({expected}) is smaller than the {events} events given")
    C = options.leaf_size
    if C < 1:
        raise SeqsketchError(f"leaf size C must be ≥ 1 event, got {C}", where="--leaf-size")
    width = max(vocabulary_size, 1)
    if pairs is None:
        pairs = leaf_type_pairs(codes, width, 0, C)
    profile = measure_distinct(pairs // width, pairs % width, C, options.fanout)
    return size_index(fpq=options.fpq, leaf_size=C, events=max(expected, 1), profile=profile,
                      memory_bytes=options.memory_bytes, query_length=options.query_length,
                      fanout=options.fanout, fold=options.fold)


def config_from(sizing: Sizing, options: BuildOptions) -> TreeConfig:
    return TreeConfig(leaf_size=options.leaf_size, m=sizing.m, k=sizing.k, fanout=options.fanout,
                      fold=options.fold, fpq=options.fpq, filter_fp=sizing.filter_fp,
                      query_length=options.query_length)


def build_tree(types: pa.Array | pa.ChunkedArray | Sequence[str] | np.ndarray,
               ts: pa.Array | pa.ChunkedArray | np.ndarray | Sequence[int],
               options: BuildOptions = DEFAULT_OPTIONS, *,
               config: TreeConfig | None = None) -> tuple[BloomTree, Sizing | None]:
    """Size (unless ``config`` is given) and build the tree over a whole stream; returns it with its sizing.

    Refuses a ``memory_bytes`` budget the sized configuration cannot meet (before building) and, because the
    sizing is an estimate, also a built index that turns out larger than the budget.
    """
    sizing = None
    codes, vocabulary = encode_types(types)
    micros = as_micros(ts)
    # The distinct (leaf, type) pairs serve both the measured profile and the leaves' bits.
    pairs = None
    if config is None:
        pairs = leaf_type_pairs(codes, max(len(vocabulary), 1), 0, options.leaf_size)
        sizing = _plan(codes, len(vocabulary), options, pairs)
        config = config_from(sizing, options)
    tree = BloomTree(config)
    if config.leaf_size != options.leaf_size:
        pairs = None
    tree.update_encoded(codes, vocabulary, micros, pairs)
    check_budget(tree, options)
    return tree, sizing


def check_budget(tree: BloomTree, options: BuildOptions) -> None:
    """Refuse a built index larger than ``options.memory_bytes``: the sizing that met the budget is an
    estimate, so every build that sized its own configuration (local or Spark) checks what it built."""
    if options.memory_bytes is None:
        return
    size = tree.stored_bytes()
    if size > options.memory_bytes:
        raise SeqsketchError(
            f"memory budget of {options.memory_bytes} bytes is too small: the index built for fpq="
            f"{options.fpq:g} with leaf size {options.leaf_size} takes {size} bytes (m={tree.config.m}, "
            f"k={tree.config.k}); allow at least {size} bytes, or loosen --fpq, or raise --leaf-size",
            where="--memory")


def build_from_table(table: pa.Table, options: BuildOptions = DEFAULT_OPTIONS, *,
                     config: TreeConfig | None = None) -> tuple[BloomTree, Sizing | None]:
    """Build from a stream table (``seq``, ``ts``, ``type``, …) whose seqs start at 0 and have no gaps."""
    if table.num_rows and "seq" in table.column_names:
        seq = table.column("seq")
        first, last = seq[0].as_py(), seq[-1].as_py()
        if first != 0 or last != table.num_rows - 1:
            raise SeqsketchError(f"the tree indexes a whole stream from seq 0; got seqs {first}…{last} "
                                 f"for {table.num_rows} events")
    return build_tree(table.column("type"), table.column("ts"), options, config=config)

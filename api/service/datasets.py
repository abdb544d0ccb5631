"""Datasets: exist, describe, list, build, append, delete and export — the service's data operations.

Every door (the CLI, the HTTP routes, the build-job runner, the demo) calls these; they call the event store
(:mod:`exact.store`) and the index (:mod:`sketch.dataset`) and nothing above them.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias, TypedDict

import numpy as np
import pyarrow as pa

from api.service.batches import batch_table, check_attr_kinds, records_for_append
from api.service.build_memory import check_local_build
from exact.errors import InputError, NotFound
from exact.events import (
    iso_of_micros,
    parse_timestamp,
    records_to_table,
)
from exact.ingest import IngestOptions, Progress, ingest, read_inputs
from exact.readers.sources import is_remote, source_exists, source_size
from exact.store import (
    EventStore,
    check_dataset_name,
    dataset_dir,
    dataset_names,
    staged_dataset,
    store_dir,
    store_published,
)
from exact.store.retention import Retention
from sketch.build_request import DEFAULT_BUILD, BuildRequest
from sketch.dataset import Dataset, build_index_into, store_extra
from sketch.dataset import dataset_info as _dataset_info

#: The ``info`` object of a dataset (docs/contract.md §4): ``name``, ``events``, ``start_ts``, ``end_ts``, ``types``,
#: ``store_bytes``, ``attrs``, ``partition_key`` and the live ``index`` (None without one).
DatasetInfo: TypeAlias = dict[str, Any]
#: What a build returns: the ``info`` object plus ``seconds`` and ``timings`` (``ingest``, ``index``).
BuildSummary: TypeAlias = dict[str, Any]
#: A build job's progress: ``(fraction done, what it is doing)``.
JobProgress: TypeAlias = Callable[[float, str | None], None]


def _unheard(fraction: float, message: str | None = None) -> None:
    """A job's progress that nobody listens to."""


class AppendResult(TypedDict, total=False):
    """What an append of records added: ``appended`` events, numbered ``first_seq`` to ``last_seq`` (an empty
    batch: ``last_seq`` is ``first_seq - 1``), and ``watermark``, how far event time has come (ISO text, or
    None when no watermark was ever given)."""

    appended: int
    first_seq: int
    last_seq: int
    watermark: str | None


def watermark_micros(value: Any, where: str = "watermark") -> int:
    """A watermark as given (ISO 8601 text, naive = UTC, or epoch seconds, as an event's ``ts``) in UTC µs."""
    try:
        return parse_timestamp(value)
    except (ValueError, TypeError) as err:
        raise InputError(f"{err}; a watermark is a time as an event's ts is (ISO 8601 or epoch seconds)",
                         where=where) from None


class Density(TypedDict):
    """Events over time: ``[start_ts, end_ts]`` cut into ``bins`` equal spans, ``counts`` events in each."""

    name: str
    start_ts: str | None
    end_ts: str | None
    bins: int
    counts: list[int]


def dataset_exists(home: Path, name: str) -> bool:
    """True when dataset ``name`` has a committed event store under ``home``."""
    return store_published(dataset_dir(check_dataset_name(name), home)) is not None


def dataset_info(home: Path, name: str) -> DatasetInfo:
    """The ``info`` object of a dataset (docs/contract.md §4)."""
    return _dataset_info(home, check_dataset_name(name))


def list_datasets(home: Path) -> list[DatasetInfo]:
    """``info`` of every dataset under ``home``, by name."""
    return [dataset_info(home, name) for name in dataset_names(home)]


def store_events(home: Path, name: str) -> int:
    """The number of events in dataset ``name``'s store."""
    return EventStore.open(store_dir(dataset_dir(check_dataset_name(name), home))).snapshot().events


def build_from_inputs(home: Path, name: str, inputs: Sequence[str | Path], request: BuildRequest = DEFAULT_BUILD, *,
                      engine: str = "local", local_memory: int | None = None, progress: Progress | None = None,
                      job_progress: JobProgress | None = None) -> BuildSummary:
    """Ingest ``inputs`` into a new dataset ``name`` under ``home`` as ``request`` asks
    (:class:`sketch.build_request.BuildRequest`: ``seqsketch build``, and the body of a build job); nothing
    is left behind on failure.

    ``engine="spark"`` runs the Spark job (:mod:`sketch.spark.job`), which reports ``job_progress(fraction,
    message)`` instead of per-batch reading ``progress`` (an :data:`exact.ingest.Progress`, told of every
    batch read).  The in-process engine first refuses inputs it estimates to need more memory than
    ``local_memory`` (:mod:`api.service.build_memory`).  The dataset lives where ``request.store`` says
    (:mod:`exact.store.replica`).

    Returns the ``build`` summary: the ``info`` object plus ``seconds`` and ``timings`` (ingest, index).
    """
    check_dataset_name(name)
    footprint, keep = request.footprint, request.keep
    if footprint is not None and not 1.0 <= footprint <= 1000.0:
        raise InputError(f"footprint must lie between 1 and 1000 (times the Parquet parts), not {footprint}",
                         where="footprint")
    if keep is not None:
        Retention.parse(keep)  # (refused before anything is read)
    if engine == "spark":
        from sketch.spark.job import build_dataset_spark

        summary = build_dataset_spark(home, name, inputs, request, progress=job_progress or _unheard)
        return summary if keep is None else {**summary, **set_retention(home, name, keep)}
    options = request.index_options()
    for path in inputs:
        if not source_exists(path):
            raise InputError("no such file", where=str(path))
    check_local_build(inputs, request.fmt, local_memory)
    started = time.perf_counter()
    with staged_dataset(name, home, replace=request.replace, store=request.store) as stage:
        table = ingest(inputs, request.ingest_options(), progress=progress)
        ingested = time.perf_counter()
        # The index is built here, inside the staged directory, so that it is published with the events:
        # the store's first manifest names it.  A refused --memory budget fails the build before any write.
        extra = build_index_into(stage, table, options, partition_key=request.key)
        index_done = time.perf_counter()
        EventStore.create(store_dir(stage), table, extra=extra | store_extra(options, table))
        del table
        stored = time.perf_counter()
    info = dataset_info(home, name) if keep is None else set_retention(home, name, keep)
    return {**info, "seconds": round(time.perf_counter() - started, 3),
            "timings": {"ingest": round(ingested - started + stored - index_done, 3),
                        "index": round(index_done - ingested, 3)}}


#: Build options of the API and the field of :class:`BuildRequest` that takes each (``engine`` is how it runs).
BUILD_OPTIONS = {"format": "fmt", "type_field": "type_field", "time_field": "time_field", "engine": "engine",
                 "leaf_size": "leaf_size", "fpq": "fpq", "memory": "memory", "replace": "replace",
                 "partition_key": "partition_key", "index_attrs": "index_attrs", "keep": "keep", "store": "store",
                 "footprint": "footprint"}


def build_dataset(home: Path, name: str, inputs: Sequence[Path], options: Mapping[str, Any], *,
                  progress: JobProgress | None = None) -> BuildSummary:
    """Run the offline build of ``seqsketch build`` for dataset ``name`` with API ``options`` (a background
    job's body).  An option the build cannot honour is an error, never silently dropped."""
    fields: dict[str, Any] = {}
    for option, value in options.items():
        field = BUILD_OPTIONS.get(option)
        if field is None:
            raise InputError(f"build option {option!r} is not supported by this server", where=option)
        fields[field] = value
    engine = fields.pop("engine", "local")
    reading = None
    if progress is not None:
        progress(0.0, "reading inputs")
        reading = _reading_progress(inputs, progress)
    # (the Spark job reports its stages itself: (fraction, message))
    return build_from_inputs(home, name, [str(p) for p in inputs], BuildRequest(**fields), engine=engine,
                             progress=reading, job_progress=progress)


def _input_key(path: str | Path) -> str:
    return str(path) if is_remote(path) else str(Path(path).resolve())


def _reading_progress(inputs: Sequence[Path], progress: JobProgress) -> Progress:
    """Adapt the reader's reports (file, events read so far) to a job's fraction and message.

    Reading is counted as the first 80% of a build, shared among the inputs by their size on disk (the
    event count of a file is unknown until it has been read); indexing and storing make up the rest.
    """
    sizes = [max(source_size(p), 1) for p in inputs]
    total = float(sum(sizes))
    before = {_input_key(p): sum(sizes[:i]) for i, p in reversed(list(enumerate(inputs)))}

    def report(path: Path, events: int) -> None:
        done = before.get(_input_key(path), 0) / total
        progress(0.8 * done, f"reading {Path(path).name}: {events:,} events")

    return report


def set_retention(home: Path, name: str, keep: str | None) -> DatasetInfo:
    """Keep ``keep`` of dataset ``name``'s history from now on (``90 days``, ``1000000 events``; None or
    ``forever``: everything), and retire what is past it at once (``seqsketch retain``); its ``info``."""
    if not dataset_exists(home, name):
        raise NotFound(f"dataset {name!r} does not exist", where=name)
    policy = None if keep is None or str(keep).strip().lower() == "forever" else Retention.parse(str(keep))
    dataset = Dataset.open(home, name)
    dataset.retain(policy)
    while dataset.retire() is not None:  # (one step at a time: each publishes)
        pass
    return dataset_info(home, name)


def delete_dataset(home: Path, name: str) -> None:
    """Remove a dataset's directory (events and index).

    The directory is first renamed out of the way — one atomic step after which readers no longer find the
    dataset — and only then removed, so a crash midway leaves a hidden remnant, never half a dataset.
    """
    path = dataset_dir(check_dataset_name(name), home)
    if not path.is_dir():
        raise NotFound(f"dataset {name!r} does not exist", where=name)
    trash = path.parent / f".trash-{name}-{uuid.uuid4().hex[:8]}"
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


# --- appends -----------------------------------------------------------------------------------------------


def append_records(home: Path, name: str, records: Sequence[Mapping[str, Any]], *,
                   watermark: Any = None) -> AppendResult:
    """Append API records to dataset ``name``, all or nothing; the index covering them is published with
    them, and with ``watermark`` (a time: :func:`watermark_micros`) event time has reached it after them
    (docs/semantics.md §5.5).  Returns ``{appended, first_seq, last_seq, watermark}``."""
    if not dataset_exists(home, name):
        raise NotFound(f"dataset {name!r} does not exist", where=name)
    mark = None if watermark is None else watermark_micros(watermark)
    dataset = Dataset.open(home, name)
    snap = dataset.store.snapshot()
    table = batch_table(records, snap.attrs)
    if table is None:  # (one by one: the first record at fault is named)
        stream = records_for_append(records)
        check_attr_kinds(stream, snap.attrs)
        table = records_to_table(stream, first_seq=None, where="events")
    before = snap.events  # (an append under the same lock follows: nobody appends between)
    after = dataset.append(table, watermark=mark)
    return {"appended": after.events - before, "first_seq": before, "last_seq": after.events - 1,
            "watermark": _iso_or_none(after.store.watermark)}


def warm_up_appends() -> float:
    """Append a batch to a dataset of a few events in a scratch home, through the real path (the batch's
    conversion, a part and its seek file, the index, a commit), so that a server's first append is not
    charged for loading what that path needs (a third of a second); returns the seconds it took."""
    import tempfile

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="seqsketch-warm-up-") as scratch:
        home = Path(scratch)

        def batch(at: float) -> list[dict[str, Any]]:
            return [{"type": "A", "ts": at, "case": "c", "amount": 1},
                    {"type": "B", "ts": at + 1, "case": "c", "amount": 2}]

        Dataset.build(home, "warm", records_to_table(records_for_append(batch(1.0))))
        append_records(home, "warm", batch(3.0))
    return time.perf_counter() - started


def _iso_or_none(micros: int | None) -> str | None:
    return None if micros is None else iso_of_micros(micros)


def append_inputs(home: Path, name: str, inputs: Sequence[str], *, fmt: str = "auto",
                  type_field: str = "type", time_field: str = "ts", engine: str = "local",
                  job_progress: JobProgress | None = None, watermark: Any = None) -> DatasetInfo:
    """Append the events of ``inputs`` to dataset ``name`` (all or nothing), then with ``watermark`` say
    that event time has reached it; returns ``info`` plus ``appended``, ``first_seq`` and ``last_seq``."""
    if not dataset_exists(home, name):
        raise NotFound(f"dataset {name!r} does not exist; build it first", where=name)
    mark = None if watermark is None else watermark_micros(watermark, "--watermark")
    before = store_events(home, name)
    if not inputs:
        Dataset.open(home, name).append(pa.table({}), watermark=mark)
        info = dataset_info(home, name)
    elif engine == "spark":
        from sketch.spark.job import append_dataset_spark

        info = append_dataset_spark(home, name, inputs, fmt=fmt, type_field=type_field, time_field=time_field,
                                    progress=job_progress or _unheard)
        if mark is not None:  # (after the events: a watermark the job's events pass is refused alone)
            Dataset.open(home, name).append(pa.table({}), watermark=mark)
            info = dataset_info(home, name)
    else:
        table = read_inputs(inputs, IngestOptions(fmt=fmt, type_field=type_field, time_field=time_field))
        Dataset.open(home, name).append(table, watermark=mark)
        info = dataset_info(home, name)
    return {**info, "appended": info["events"] - before, "first_seq": before, "last_seq": info["events"] - 1}


def compact_dataset(home: Path, name: str) -> DatasetInfo:
    """Fold the events appended since the last build into the partition-clustered index
    (``seqsketch compact``); returns the dataset's ``info``."""
    if not dataset_exists(home, name):
        raise NotFound(f"dataset {name!r} does not exist", where=name)
    Dataset.open(home, name).compact()
    return dataset_info(home, name)


# --- events over time ---------------------------------------------------------------------------------------

#: Bins of :func:`event_density`: fine enough for a timeline zoomed eightfold to keep 100 bins in view.
DENSITY_BINS = 800


def event_density(home: Path, name: str, bins: int = DENSITY_BINS) -> Density:
    """Events over time: the dataset's ``[start_ts, end_ts]`` cut into ``bins`` equal spans and the number of
    events in each.  For a timeline's density strip; reads the ``ts`` column only (8 bytes an event)."""

    from exact.events import iso_of_micros

    if not dataset_exists(home, name):
        raise NotFound(f"dataset {name!r} does not exist", where=name)
    ts = EventStore.open(store_dir(dataset_dir(name, home))).read_table(columns=["ts"]).column("ts")
    micros = ts.cast("int64").to_numpy() if ts.num_chunks else np.zeros(0, dtype=np.int64)
    if micros.size == 0:
        return {"name": name, "start_ts": None, "end_ts": None, "bins": 0, "counts": []}
    first, last = int(micros[0]), int(micros[-1])  # stream order is ts order
    # in floating point: (ts - first) * bins overflows 64 bits for spans of centuries
    index = np.minimum(((micros - first) / float(last - first + 1) * bins).astype(np.int64), bins - 1)
    counts = np.bincount(index, minlength=bins)
    return {"name": name, "start_ts": iso_of_micros(first), "end_ts": iso_of_micros(last), "bins": bins,
            "counts": counts.tolist()}

"""What a new dataset is built from and with: one options object for the local and the Spark build alike."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from exact.ingest import IngestOptions
from sketch.build import DEFAULT_OPTIONS, BuildOptions
from sketch.partition.files import AUTO_KEY


@dataclass(frozen=True)
class BuildRequest:
    """A build as ``seqsketch build`` and ``POST /v1/datasets/{name}/builds`` ask for it (docs/contract.md §4.1):
    how the inputs are read, the index's options (None: the defaults), the partition key, the retention the
    service sets once it is built, where the dataset lives, and whether it replaces one."""

    #: the inputs' format (``auto``: by their names) and the fields that hold each event's type and time
    fmt: str = "auto"
    type_field: str = "type"
    time_field: str = "ts"
    #: the tree's leaf size, false-positive rate per query and memory budget in bytes (``--memory``)
    leaf_size: int | None = None
    fpq: float | None = None
    memory: int | None = None
    #: the attribute events are clustered by (``AUTO_KEY``: ``case`` when every event has it; None or ``""``:
    #: none)
    partition_key: str | None = AUTO_KEY
    #: the attributes served in place for conditions (``()``: none; None: the cheapest within the budget)
    index_attrs: Sequence[str] | None = None
    #: the whole dataset's budget in times its Parquet parts (None: the default)
    footprint: float | None = None
    #: a retention (``90 days``, ``1000000 events``) set once the dataset is built
    keep: str | None = None
    #: the object-storage location it lives at (``s3://bucket/prefix``; None: ``SEQSKETCH_STORE``, else disk)
    store: str | None = None
    #: whether a dataset of that name is replaced (else: a conflict)
    replace: bool = False

    def ingest_options(self) -> IngestOptions:
        """How the inputs are read."""
        return IngestOptions(fmt=self.fmt, type_field=self.type_field, time_field=self.time_field)

    def index_options(self) -> BuildOptions:
        """The index's options, the defaults where none is given."""
        return BuildOptions(leaf_size=self.leaf_size or DEFAULT_OPTIONS.leaf_size, fpq=self.fpq or DEFAULT_OPTIONS.fpq,
                            memory_bytes=self.memory,
                            index_attrs=tuple(self.index_attrs) if self.index_attrs is not None else None,
                            footprint=self.footprint)

    @property
    def key(self) -> str | None:
        """The partition key, None for none."""
        return self.partition_key or None


#: A build that asks for nothing but the defaults.
DEFAULT_BUILD = BuildRequest()

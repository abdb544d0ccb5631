"""Retention: a dataset keeps a time span or a number of its latest events, and retires the parts before.

A policy (:class:`Retention`, kept in the store's ``extra`` under :data:`RETAIN_KEY`) says how much history a
dataset keeps: ``90 days`` (the events within that span of the latest event time — the last event, or the
watermark past it) or ``1000000 events`` (the latest that many).  Whole parts are retired, the oldest first,
once every event they hold is past the policy — so a dataset keeps at least what its policy says, and at
most a part more.  Seqs are never reused: the stream then starts at :attr:`~exact.store.Snapshot.
retained_from`, and a retired seq reads as nothing.  The trees, the partition layout and the decayed summary
of what was retired are the dataset's business (:meth:`sketch.dataset.Dataset.retire`); this module says
which parts go and what they held.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from exact.errors import InputError
from exact.query.language.temporal import MAX_WITHIN_MICROS, duration_micros, format_duration
from exact.store.manifest import PartInfo, Snapshot

#: The store's ``extra`` key holding the policy.
RETAIN_KEY = "retain"
_SPAN = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]+)\s*", re.ASCII)


@dataclass(frozen=True)
class Retention:
    """How much history a dataset keeps: a span of event time (µs) or a number of events (one of them)."""

    span_us: int | None = None
    events: int | None = None

    def __post_init__(self) -> None:
        if (self.span_us is None) == (self.events is None):
            raise InputError("a retention keeps a time span or a number of events, one of them", where="keep")
        if self.span_us is not None and not 0 < self.span_us <= MAX_WITHIN_MICROS:
            raise InputError("a retention's span must be positive and at most 100 years", where="keep")
        if self.events is not None and self.events < 1:
            raise InputError("a retention keeps at least one event", where="keep")

    @classmethod
    def parse(cls, text: str) -> Retention:
        """``90 days``, ``90d``, ``12 hours``, or ``1000000 events``."""
        found = _SPAN.fullmatch(text) if isinstance(text, str) else None
        if found is None:
            raise InputError(f"keep {text!r}: expected a span (e.g. '90 days', '12h') or a number of events "
                             "(e.g. '1000000 events')", where="keep")
        number, unit = found.group(1), found.group(2).lower()
        if unit in ("event", "events"):
            if "." in number:
                raise InputError(f"keep {text!r}: a number of events is whole", where="keep")
            return cls(events=int(number))
        try:
            return cls(span_us=duration_micros(number, unit))
        except ValueError as err:
            raise InputError(f"keep {text!r}: {err}", where="keep") from None

    def text(self) -> str:
        return f"{self.events} events" if self.events is not None else format_duration(int(self.span_us or 0))

    def to_json(self) -> dict[str, Any]:
        return {"events": self.events} if self.events is not None else {"span_us": self.span_us}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> Retention | None:
        if not d:
            return None
        return cls(span_us=d.get("span_us"), events=d.get("events"))


def policy_of(snap: Snapshot) -> Retention | None:
    return Retention.from_json((snap.extra or {}).get(RETAIN_KEY))


def retirable(snap: Snapshot, policy: Retention | None) -> list[PartInfo]:
    """The oldest parts every event of which is past ``policy`` (never the last part)."""
    if policy is None or len(snap.parts) < 2:
        return []
    out: list[PartInfo] = []
    if policy.events is not None:
        first_kept = snap.events - policy.events
        for p in snap.parts[:-1]:
            if p.last_seq >= first_kept:
                break
            out.append(p)
    else:
        assert policy.span_us is not None and snap.last_ts is not None
        now = snap.event_time if snap.event_time is not None else snap.last_ts
        oldest = now - policy.span_us
        for p in snap.parts[:-1]:
            if p.max_ts >= oldest:
                break
            out.append(p)
    return out


def counts_of(store: object, parts: Sequence[PartInfo], snap: Snapshot) -> dict[str, int]:
    """How many events of each type ``parts`` hold (read from the store: only their types)."""
    from exact.store import EventStore

    assert isinstance(store, EventStore)
    counts: dict[str, int] = {}
    for p in parts:
        table = store.read_table(p.first_seq, p.last_seq, columns=["seq", "type"], snapshot=snap)
        values, numbers = np.unique(np.asarray(table.column("type").to_pylist(), dtype=object), return_counts=True)
        for typ, n in zip(values.tolist(), numbers.tolist(), strict=True):
            counts[typ] = counts.get(typ, 0) + int(n)
    return counts

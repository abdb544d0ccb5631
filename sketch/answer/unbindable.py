"""The cause of an empty answer that the events read tell at once: a position of the pattern no event there
fits on its own (by type and by the conditions on its variable alone), named with those conditions
(:func:`sketch.answer.cause.why_empty` says it before, or instead of, relaxing the query)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from exact.frame import EventFrame
from exact.prefilter import condition_mask, type_mask, variable_bits
from exact.query.ast import Condition, Field, Literal
from exact.query.language import condition_text
from exact.query.normalize import Plan


def unbindable(plan: Plan, pieces: Sequence[EventFrame | pa.Table], types: frozenset[str] | None, *,
               filtered: bool) -> str | None:
    """The cause when a position of the pattern has no event in the read that fits it on its own (by type
    and by the conditions on its variable alone): those of its variable's conditions that alone hold for
    none of its type's events there (or all of them together), with the number of those events.  Counted
    with the engine's own per-variable test on the events read (every event of the types read)."""
    if not any(v.properties for v in plan.positives):
        return None
    frames = [events if isinstance(events, EventFrame) else EventFrame.build(events) for events in pieces]
    fitting = np.zeros(len(plan.positives), dtype=np.int64)
    for frame in frames:
        fitting += np.asarray(variable_bits(frame, plan.positives)[1], dtype=np.int64)
    said: list[str] = []
    for first in (g for element in plan.elements for g in element):
        members = plan.group_members[first]
        if any(fitting[i] for i in members):
            continue
        variables = [plan.positives[i] for i in members]
        if not all(v.types is not None and v.types <= (types or v.types) for v in variables):
            return None  # (a variable of any type: not all its events were read)
        parts = []
        for v in variables:
            assert v.types is not None
            names = " or ".join(sorted(v.types))
            # the conditions the engine tests on v alone (those written, and those the equality closure
            # adds); a presence test (PARTITION BY) is not named: the cause is then left to the search
            own = [c for c in v.properties if one_variable(c)]
            if not own or len(own) < len(v.properties) or any(_presence(c) for c in own):
                return None
            if filtered:
                # the read kept only events some variable can bind: v's type's others are not at hand
                text = " AND ".join(condition_text(c) for c in own)
                parts.append(f"`{text}` {'holds' if len(own) == 1 else 'together hold'} for none of the "
                             f"{names} events in them")
                continue
            of_type = sum(int(type_mask(f, v.types).sum()) for f in frames)
            if not of_type:
                return None
            alone = [c for c in own if not any((type_mask(f, v.types) & condition_mask(f, c)).any() for f in frames)]
            if len(alone) == 1:
                what = f"`{condition_text(alone[0])}` holds"
            elif alone:
                what = " and ".join(f"`{condition_text(c)}`" for c in alone) + " each hold"
            else:
                what = "`" + " AND ".join(condition_text(c) for c in own) + "` together hold"
            parts.append(f"{what} for none of the {of_type:,} {names} events they hold")
        said.append(" or ".join(v.name for v in variables) + ": " + "; ".join(parts))
    return "no event in them can bind " + "; nor ".join(said) if said else None


def _presence(cond: Condition) -> bool:
    """``v.x = v.x``: the "x is present" PARTITION BY adds."""
    return (isinstance(cond.left, Field) and isinstance(cond.right, Field)
            and cond.left.attr == cond.right.attr)


def one_variable(cond: Condition) -> bool:
    """Can ``cond`` be evaluated over single events (a property: no ``prev``, no run operand)?"""
    return all(isinstance(o, (Field, Literal)) and not (isinstance(o, Field) and o.prev)
               for o in (cond.left, cond.right))

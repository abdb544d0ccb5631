"""The one-pass funnel kernel (exact/engine/funnel_pass.py) against its definition, followed start by start:
from every event of the first step's type, each next step is the first event of its type after the last one
taken, in the same unit, within the window; a unit's answer for a step is its earliest start that reaches it."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from exact.engine.funnel_pass import EVENT_WINDOW, NO_WINDOW, TIME_WINDOW, funnel_times
from tests.generators import scaled


def _chain(events: list[tuple[int, int, int, int]], at: int, steps: list[int], kind: int, bound: int
           ) -> list[int]:
    """The ts of each step a start at ``events[at]`` reaches, by walking the stream after it."""
    seq0, ts0, _, unit = events[at]
    out, last = [ts0], at
    for code in steps[1:]:
        nxt = next((i for i in range(last + 1, len(events)) if events[i][3] == unit and events[i][2] == code), None)
        if nxt is None or (kind == TIME_WINDOW and events[nxt][1] - ts0 > bound) or \
                (kind == EVENT_WINDOW and events[nxt][0] - seq0 >= bound):
            break
        out.append(events[nxt][1])
        last = nxt
    return out


@scaled(300)
@given(data=st.data(), keyed=st.booleans())
def test_the_pass_equals_the_chains_followed_one_start_at_a_time(data: st.DataObject, keyed: bool) -> None:
    n = data.draw(st.integers(0, 60))
    gaps = data.draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    seq = np.cumsum(np.asarray(gaps, dtype=np.int64)) if n else np.zeros(0, np.int64)
    ts = np.cumsum(np.asarray(data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), dtype=np.int64))
    codes = np.asarray(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=np.int64)
    units = np.asarray(data.draw(st.lists(st.integers(0, 4 if keyed else 0), min_size=n, max_size=n)),
                       dtype=np.int64)
    steps = data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=6))  # (4: a type no event has)
    kind, bound = data.draw(st.sampled_from([(NO_WINDOW, 0), (TIME_WINDOW, 0), (TIME_WINDOW, 5),
                                             (EVENT_WINDOW, 1), (EVENT_WINDOW, 7)]))
    took, whole = funnel_times(seq, ts, codes, units, np.asarray(steps, dtype=np.int64), kind, bound, keyed)

    events = list(zip(seq.tolist(), ts.tolist(), codes.tolist(), units.tolist(), strict=True))
    starts = [i for i, e in enumerate(events) if e[2] == steps[0]]
    chains = {i: _chain(events, i, steps, kind, bound) for i in starts}
    assert whole == sum(len(c) == len(steps) for c in chains.values())
    columns = (max(units.tolist(), default=-1) + 1) if keyed else len(starts)
    expected = np.full((len(steps), columns), -1, dtype=np.int64)
    for number, i in enumerate(starts):
        column = events[i][3] if keyed else number
        for j, stamp in enumerate(chains[i]):
            if expected[j, column] < 0:  # (the unit's earliest start that reaches step j)
                expected[j, column] = stamp - events[i][1]
    assert took.tolist() == expected.tolist()

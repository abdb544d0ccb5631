"""The events after an event in its own group of a partition layout (:meth:`exact.store.grouping.Layout.following`,
what ``RETURN next k`` reads under the layout's key): a compiled walk of the group's runs of ``order``, one per
type the group holds, without reading the stream."""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def following_compiled() -> Any:
    """:func:`_following` compiled (cached on disk) on first use: importing this module loads no numba."""
    import numba

    return numba.njit(cache=True, nogil=True)(_following)


def _following(ends: Any, group_of: Any, order: Any, type_off: Any, type_rows: Any, type_codes: Any,
               seqs: Any, codes: Any) -> None:
    """Fills row ``i`` of ``seqs`` and ``codes`` with the events after ``ends[i]`` in its group, in stream
    order: each step takes, over the group's (group, type) entries, the first event of the entry's run of
    ``order`` (ascending seqs) after the one before, and the least of them."""
    k = seqs.shape[1]
    for i in range(len(ends)):
        g = group_of[ends[i]]
        if g < 0:
            continue
        after = ends[i]
        for step in range(k):
            best = -1
            best_code = -1
            for entry in range(type_off[g], type_off[g + 1]):
                lo = type_rows[entry]
                hi = type_rows[entry + 1]
                while lo < hi:  # the first of the run after ``after``
                    mid = (lo + hi) >> 1
                    if order[mid] <= after:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo < type_rows[entry + 1] and (best < 0 or order[lo] < best):
                    best = order[lo]
                    best_code = type_codes[entry]
            if best < 0:
                break
            seqs[i, step] = best
            codes[i, step] = best_code
            after = best

"""Approximate evaluation of a query on the Bloom-filter tree: candidate intervals (Baltus 2021, §4.2–4.3).

The tree knows, per node, only which event *types* may occur in the node's interval ("maybe" or "no";
Bloom filters have no false negatives).  Conditions cannot be checked on it; they only make exact matches
fewer, so the approximate evaluator reasons about type occurrence alone and is a *necessary* condition for
every exact match — the guarantee that verification builds on (docs/contract.md §3.5, guarantee 2).

The evaluation, module by module: the stream is cut into units (:mod:`~sketch.evaluate.units`, Baltus
§4.3.2); for each position of the pattern the units that may hold one of its types are found top-down on the
tree (:mod:`~sketch.evaluate.occurrence`, Baltus 2021 §4.3); a match's elements occupy a non-decreasing chain of units
within its window (:mod:`~sketch.evaluate.chains`, Baltus 2021 §4.3.1–4.3.4); :func:`approximate`
(:mod:`~sketch.evaluate.candidates`) puts these together into an :class:`Approximation`
(:mod:`~sketch.evaluate.approximation`): the candidate intervals, the units verification must read, and an
``explain`` text when nothing can match (:mod:`~sketch.evaluate.explain`).
"""

from __future__ import annotations

from sketch.evaluate.approximation import Approximation, Region
from sketch.evaluate.candidates import approximate, approximate_exists, tree_narrows, whole_stream
from sketch.evaluate.occurrence import TreeIndex
from sketch.evaluate.units import PerfectIndex, TypeIndex, Units, units_at

__all__ = ["Approximation", "PerfectIndex", "Region", "TreeIndex", "TypeIndex", "Units", "approximate",
           "approximate_exists", "tree_narrows", "units_at", "whole_stream"]

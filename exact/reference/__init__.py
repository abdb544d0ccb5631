"""A brute-force reference for the exact engine, written straight from the definitions — slow, for small
streams (a dozen events), and meant to be obviously right.

* **All matches** (Cadonna 2013, Def. 3.2): every substitution binding each positive variable (one
  alternative per OR position) to one event, or a Kleene variable to a non-empty increasing sequence, no
  event used twice, such that (3.1) every condition holds under the ∀-interpretation (a condition naming
  an OR alternative that is not bound does not apply; ``prev`` over consecutive pairs; a condition on one
  variable holds for each of its events), (3.2) every event of element i precedes (by seq) every event of
  element i+1, (3.3) the window holds, ``PARTITION BY`` gives all bound events one equal, non-null value.
  SASE+ run operands (docs/query-language.md, "Kleene runs and aggregates"): a condition with ``v[i-1]`` or
  ``v[..i-1]`` holds at each event of v's run from the second on, ``v[1]``, ``v[last]``, ``count(v)`` and
  whole-run aggregates are values of the complete binding (:mod:`exact.query.operands`).
  The search assigns the stream's events in order to a variable or to none and checks each complete
  substitution against the definition; it prunes only with per-event facts (type, literal properties,
  element order, window) that any match must satisfy.
* **skip-till-any-match** = all matches.  **strict contiguity**: the matches whose events are exactly the
  stream's events between their first and last; **partition contiguity**: the same among the events of
  the match's partition (``PARTITION BY``; without it, the whole stream).
* **skip-till-next-match** (Def. 6.1): no strict prefix ``γ̂`` (the first i events of γ) extends by an
  event ``e`` strictly between its last event and γ's next event, for any variable v, to a match of a
  prefix of the pattern; plus the trailing-Kleene rule of the automaton (docs/semantics.md A3): γ itself
  extends by no event after its last one within the window of its first.  Prefix patterns use the *normalised*
  conditions (the equality closure of :mod:`exact.query.normalize`), on which the strategy depends
  (docs/semantics.md A8),
  each once it is decidable on the prefix: a condition reading the finished run of v (``v[last]``,
  ``count(v)``, ``avg(v.x)``) only once an event of a later element is bound — so it never applies to the
  extension of a trailing Kleene run, which grows maximally and is then judged whole.
* **robust skip-till-next-match** (Def. 6.2): as Def. 6.1, but ``γ̂ ⊎ {v/e}`` must be a prefix of some
  match in Γ; with the same trailing rule.
* An OR position bound to the same events under several alternatives counts once, under the first
  alternative; then SASE+ negation drops matches with a forbidden event (its type, conditions and
  partition) strictly inside a negated gap, or for a trailing NOT after the last positive event and within
  the window of the first.

The package's modules: :mod:`~exact.reference.reference_events` (the stream as events, and a stream table from rows),
:mod:`~exact.reference.matches` (all matches, Def. 3.2), :mod:`~exact.reference.reference_strategies` (the strategies'
choice among them), :mod:`~exact.reference.reference_answer` (OR alternatives, negation, :func:`reference_matches`).
"""

from __future__ import annotations

from exact.reference.matches import Binding, all_matches, is_match
from exact.reference.matches import _structure as _structure  # the tests check this step on its own
from exact.reference.reference_answer import negation_filter, one_alternative, reference_matches
from exact.reference.reference_events import Ev, read_events, stream_table
from exact.reference.reference_strategies import _prefix as _prefix  # (likewise)
from exact.reference.reference_strategies import _prefix_vars_ok as _prefix_vars_ok  # (likewise)
from exact.reference.reference_strategies import contiguous_matches, next_matches, robust_next_matches

__all__ = ["Binding", "Ev", "all_matches", "contiguous_matches", "is_match", "negation_filter", "next_matches",
           "one_alternative", "read_events", "reference_matches", "robust_next_matches", "stream_table"]

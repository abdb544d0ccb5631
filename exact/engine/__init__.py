"""The exact engine: the matches of a query in a stream, under its strategy (docs/semantics.md).

:func:`evaluate_table` is the one entry point; the modules of this package are its parts:

=================  ==========================================================================
module             holds
=================  ==========================================================================
``driver``         :func:`evaluate_table` and :func:`evaluate`: plan, prune, run, keep what RETURN asks
``automaton``      the SES automaton of a query (Cadonna §4.3)
``program``        its reachable states, transitions and conditions laid out as arrays
``ordering``       the events laid out for the kernels: program order, window ends, successors, values
``kernels``        the compiled strategy loops (numba) and their parts, made by an explicit factory
``chain``          skip-till-next-match chains: linear passes, or bisections with a Kleene element
``prune``          the windows worth running (Alg. 3 / Thm. 5.2, rarest-first necessary starts)
``negation``       SASE+ negation over the matches' gaps
``matchtable``     columnar matches and the answer made of them
=================  ==========================================================================
"""

from exact.engine.driver import (
    MAX_VARIABLES,
    Budget,
    absent_types,
    evaluate,
    evaluate_table,
    warm_up,
)
from exact.engine.matchtable import (
    Match,
    MatchTable,
    answer,
    iso_ts,
    iso_ts_many,
    match_ts,
    merge_intervals,
    merge_spans,
    ts_lookup,
)

__all__ = ["MAX_VARIABLES", "Budget", "Match", "MatchTable", "absent_types", "answer", "evaluate",
           "evaluate_table", "iso_ts", "iso_ts_many", "match_ts", "merge_intervals", "merge_spans", "ts_lookup",
           "warm_up"]

"""The answer planner: the three modes (exact, approximate, verified) and why an answer is empty.

=================  ==========================================================================
module             holds
=================  ==========================================================================
``verify``         the modes; the planner picks the tree (``stats.index``)
``cause``          why a verified answer is empty: the query relaxed one part at a time
=================  ==========================================================================
"""

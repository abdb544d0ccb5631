"""What a query is: the pattern AST, its text and JSON forms, and the plan the engine runs.

=================  ==========================================================================
module             holds
=================  ==========================================================================
``ast``            the query AST (docs/contract.md §2)
``language/``      the parser (Lark grammar ``query.lark``), JSON form, printer and checks
``normalize``      a query → a :class:`~exact.query.normalize.Plan`: properties, relations, the
                   equality closure (docs/semantics.md A8), comparison by the project's rule
``operands``       SASE+ run operands and aggregates (``v[1]``, ``v[last]``, ``count``, ``sum`` …)
=================  ==========================================================================
"""

"""What a query is: the pattern AST, its text and JSON forms, and the plan the engine runs.

=================  ==========================================================================
module             holds
=================  ==========================================================================
``ast``            the query AST (docs/contract.md §2)
``language/``      the parser (Lark grammar ``query.lark``), JSON form, printer and checks
``normalize``      a query → a :class:`~exact.query.plan.Plan`: validation, properties, relations,
                   partitions, the types each variable can bind
``plan``           the plan's classes (:class:`~exact.query.plan.Plan`, ``VarPlan``)
``closure``        conditions in canonical orientation, the equality closure (docs/semantics.md A8)
``comparison``     comparison by the project's rule (null false, mixed kinds never equal)
``operands``       SASE+ run operands and aggregates (``v[1]``, ``v[last]``, ``count``, ``sum`` …)
=================  ==========================================================================
"""

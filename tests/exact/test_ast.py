from exact.query.ast import Absent, EventSet, Query, Single, Var


def test_query_lists_positive_and_negated_variables_in_pattern_order():
    a, b, c, d = Var("a", "A"), Var("b", "B", kleene=True), Var("c", "C"), Var("d", None)
    q = Query(pattern=(Single(a), Absent((c,)), EventSet((b, d))))
    assert [v.name for v in q.variables()] == ["a", "c", "b", "d"]
    assert [v.name for v in q.positive_variables()] == ["a", "b", "d"]
    assert q.var("c") is c

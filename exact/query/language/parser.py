"""Text → :class:`exact.query.ast.Query`: the Lark LALR(1) grammar in ``query.lark``, a walk of its parse tree, and
the semantic checks of :mod:`exact.query.language.checks`.

Every failure becomes a :class:`~exact.errors.QuerySyntaxError`, :class:`~exact.errors.QuerySemanticError` or
:class:`~exact.errors.QueryLimitError` with the line and column of the offending token and, for syntax errors,
the tokens that would have been valid, in words.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from lark import Lark, ParseTree, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

import exact.query.language.lexical as lexical
import exact.query.language.temporal as temporal
from exact.errors import QueryLimitError, QuerySemanticError, QuerySyntaxError, SeqsketchError
from exact.query.ast import (
    AGGREGATES,
    Absent,
    Aggregate,
    AnyOf,
    Between,
    Condition,
    Element,
    EventSet,
    Field,
    Literal,
    Operand,
    Query,
    Return,
    RunEvent,
    Single,
    Strategy,
    Var,
    WithinEvents,
    WithinTime,
)
from exact.query.language.checks import MAX_QUERY_BYTES, check_query
from exact.query.language.locator import Key, TokenLocator

_GRAMMAR = Path(__file__).with_name("query.lark")

#: Terminal → how an error message names it, in the order they are listed.
_TERMINAL_WORDS = {
    "PATTERN": "PATTERN", "SEQ": "SEQ", "LBRACE": "'{'", "AND": "AND", "OR": "OR", "NOT": "NOT", "ANY": "ANY",
    "IDENT": "a name", "STRING": "a quoted string", "NUMBER": "a number", "TRUE": "true", "FALSE": "false",
    "NULL": "null", "PREV": "prev", "PLUS": "'+'", "DOT": "'.'", "OP": "a comparison (=, !=, <, <=, >, >=)",
    "LPAR": "'('", "COMMA": "','", "RPAR": "')'", "RBRACE": "'}'", "WHERE": "WHERE", "PARTITION": "PARTITION",
    "BY": "BY", "WITHIN": "WITHIN", "EVENTS": "EVENTS", "EVENT": "EVENT", "BETWEEN": "BETWEEN",
    "STRATEGY": "STRATEGY", "RETURN": "RETURN", "LSQB": "'['", "RSQB": "']'", "MINUS": "'-'",
    "DOTDOT": "'..'", "$END": "end of query",
}
_OPERATOR_SPELLINGS = {"==": "=", "<>": "!="}


@cache
def _lark() -> Lark:
    """The parser, built once on first use.  LALR tables take a few tens of milliseconds to make, so lark
    keeps them in a cache file in the temporary directory (keyed by the grammar and the options), which
    spares a fresh ``seqsketch query`` process that time."""
    return Lark(_GRAMMAR.read_text(encoding="utf-8"), parser="lalr", lexer="contextual",
                propagate_positions=False, maybe_placeholders=False, cache=True)


def parse(text: str, attr_kinds: Mapping[str, str] | None = None) -> Query:
    """Parse query text (docs/contract.md §2) into a checked :class:`Query`; raises a SeqsketchError subclass.
    ``attr_kinds``: a dataset's attribute kinds, to check comparisons against (:func:`check_query`)."""
    if not isinstance(text, str):
        raise QuerySyntaxError(f"a query must be text, not {type(text).__name__}")
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_QUERY_BYTES:
        raise QueryLimitError(f"the query is {size} bytes long; at most {MAX_QUERY_BYTES} are allowed")
    try:
        tree = _lark().parse(text)
    except UnexpectedInput as exc:
        raise _syntax_error(exc, text) from None
    builder = _TreeReader()
    query = builder.read(tree)
    return check_query(query, TokenLocator(builder.positions), attr_kinds)


# --------------------------------------------------------------------------------------------- tree → AST


@dataclass(frozen=True)
class _VarDraft:
    type: str | None
    kleene: bool
    name: str | None
    type_token: Token
    name_token: Token | None


def _error(cls: type[SeqsketchError], message: str, token: Token) -> SeqsketchError:
    return cls(message, line=token.line, column=token.column)


def _tokens(tree: ParseTree) -> list[Token]:
    return [c for c in tree.children if isinstance(c, Token)]


def _subtrees(tree: ParseTree, data: str | None = None) -> list[ParseTree]:
    return [c for c in tree.children if isinstance(c, Tree) and (data is None or c.data == data)]


def _first_token(node: ParseTree | Token) -> Token:
    while isinstance(node, Tree):
        node = node.children[0]
    return node


class _TreeReader:
    """Reads one parse tree into a Query and records ``key → (line, column)`` for the checks' messages."""

    def __init__(self) -> None:
        self.positions: dict[Key, tuple[int, int]] = {}
        self.variables: dict[str, Var] = {}
        self.negated: set[str] = set()

    def _mark(self, key: Key, token: Token) -> None:
        # the parser's tokens always carry their position (Lark's types leave it optional for hand-made ones)
        if token.line is not None and token.column is not None:
            self.positions[key] = (token.line, token.column)

    def read(self, tree: ParseTree) -> Query:
        pattern_tree, *clauses = _subtrees(tree)
        self._mark(("query",), _first_token(tree))
        pattern = self._pattern(pattern_tree)
        fields: dict[str, object] = {}
        for clause in clauses:
            fields.update(getattr(self, f"_clause_{clause.data}")(clause))
        return Query(pattern=pattern, **fields)  # type: ignore[arg-type]

    # pattern ------------------------------------------------------------------------------------------------

    def _pattern(self, tree: ParseTree) -> tuple[Element, ...]:
        element_trees = _subtrees(tree) if tree.data == "seq" else [tree]
        drafts: list[tuple[str, list[_VarDraft]]] = []
        for k, element in enumerate(element_trees):
            self._mark(("element", k), _first_token(element))
            drafts.append((element.data, [self._var(v) for v in _subtrees(element, "var")]))
        flat = [v for _, vs in drafts for v in vs]
        names = lexical.assign_default_names([(v.type, v.name) for v in flat])
        for i, draft in enumerate(flat):
            self._mark(("var", i), draft.type_token)
            self._mark(("var_type", i), draft.type_token)
            self._mark(("var_name", i), draft.name_token or draft.type_token)
        variables = iter(Var(name, d.type, d.kleene) for name, d in zip(names, flat, strict=True))
        elements = tuple(_element(kind, tuple(next(variables) for _ in vs)) for kind, vs in drafts)
        for elem in elements:
            for var in elem.vars:
                self.variables.setdefault(var.name, var)
                if isinstance(elem, Absent):
                    self.negated.add(var.name)
        return elements

    def _var(self, tree: ParseTree) -> _VarDraft:
        vtype, *rest = tree.children
        type_token = _first_token(vtype)
        if type_token.type == "ANY":
            type_name = None
        elif type_token.type == "STRING":
            type_name = self._string(type_token)
            if not type_name:
                raise _error(QuerySemanticError, "empty event type name; expected a type or ANY", type_token)
        else:
            type_name = str(type_token)
        kleene = any(isinstance(t, Token) and t.type == "PLUS" for t in rest)
        name_token = next((t for t in rest if isinstance(t, Token) and t.type == "IDENT"), None)
        return _VarDraft(type_name, kleene, str(name_token) if name_token else None, type_token, name_token)

    # WHERE --------------------------------------------------------------------------------------------------

    def _clause_where(self, tree: ParseTree) -> dict[str, object]:
        conditions = []
        for j, cond in enumerate(_subtrees(tree, "cond")):
            (left, right), (op_token,) = _subtrees(cond), _tokens(cond)  # operand, operator, operand
            self._mark(("cond", j), _first_token(left))
            self._mark(("op", j), op_token)
            operands = [self._operand(node, j, side) for side, node in enumerate((left, right))]
            op = _OPERATOR_SPELLINGS.get(str(op_token), str(op_token))
            conditions.append(Condition(operands[0], op, operands[1]))
        return {"where": tuple(conditions)}

    def _operand(self, node: ParseTree, j: int, side: int) -> Operand:
        self._mark(("operand", j, side), _first_token(node))
        if node.data == "literal":
            return Literal(self._literal(_tokens(node)[0]))
        if node.data == "call":
            return self._aggregate(node, j, side)
        var_token = next(t for t in _tokens(node) if t.type == "IDENT")
        self._mark(("operand_var", j, side), var_token)
        attr = self._attr(_subtrees(node, "attr")[0])
        if node.data == "run_field":
            return self._run_field(str(var_token), attr, _subtrees(node, "run_index")[0])
        return Field(str(var_token), attr, prev=node.data == "prev_field")

    def _run_field(self, var: str, attr: str, index: ParseTree) -> Operand:
        """``v[i].x`` is ``v.x``, ``v[i-1].x`` is ``prev(v.x)``; ``v[1].x`` and ``v[last].x`` are the run's
        ends."""
        tokens = _tokens(index)
        written = "".join(str(t) for t in tokens)
        word = str(tokens[0]).lower()
        operand: Operand | None = None
        if len(tokens) == 1 and tokens[0].type == "IDENT" and word == "i":
            operand = Field(var, attr)
        elif len(tokens) == 3 and word == "i" and str(tokens[2]) == "1":
            operand = Field(var, attr, prev=True)
        elif len(tokens) == 1 and tokens[0].type == "IDENT" and word == "last":
            operand = RunEvent(var, attr, "last")
        elif len(tokens) == 1 and tokens[0].type == "NUMBER" and str(tokens[0]) == "1":
            operand = RunEvent(var, attr, "first")
        if operand is None:
            raise _error(QuerySyntaxError, f"unknown run index {var}[{written}]; expected {var}[i] (the "
                         f"current event), {var}[1] (the first), {var}[i-1] (the previous) or {var}[last] "
                         "(the last)", tokens[0])
        self._require_kleene(var, f"{var}[{written}]", tokens[0])
        return operand

    def _aggregate(self, node: ParseTree, j: int, side: int) -> Aggregate:
        func_token, _, var_token, *_ = _tokens(node)
        self._mark(("operand_var", j, side), var_token)
        func = str(func_token).lower()
        if func not in AGGREGATES:
            raise _error(QuerySyntaxError, f"unknown function '{func_token}'; expected one of "
                         + ", ".join(AGGREGATES) + " (or prev)", func_token)
        before = _subtrees(node, "before")
        if before:
            inside = _tokens(before[0])
            upper, one = inside[2], inside[4]
            if str(upper).lower() != "i" or str(one) != "1":
                written = "".join(str(t) for t in inside)
                raise _error(QuerySyntaxError, f"unknown range {var_token}{written}; expected "
                             f"{var_token}[..i-1] (the events of the run before the current one)", upper)
        attrs = _subtrees(node, "attr")
        return Aggregate(func, str(var_token), self._attr(attrs[0]) if attrs else None, bool(before))

    def _require_kleene(self, var: str, written: str, token: Token) -> None:
        """``v[i]`` and its kin index a Kleene run: refuse them on a variable that binds one event (here,
        where the index was written: the AST of ``v[i].x`` is that of ``v.x``)."""
        declared = self.variables.get(var)
        if declared is None or declared.kleene:
            return  # an unknown variable is the checks' to report
        if var in self.negated:
            raise _error(QuerySemanticError, f"{written}: '{var}' is negated, so a match binds no event to "
                         "it and it has no run; run indexes need a positive Kleene variable", token)
        raise _error(QuerySemanticError, f"{written} indexes the events of a Kleene run, but '{var}' binds a "
                     f"single event (declared without '+'); write {var}.x for its field", token)

    def _attr(self, tree: ParseTree) -> str:
        token = _tokens(tree)[0]
        if token.type == "STRING":
            value = self._string(token)
            if not value:
                raise _error(QuerySemanticError, "empty attribute name; expected a name", token)
            return value
        return str(token)

    def _literal(self, token: Token) -> str | int | float | bool | None:
        if token.type == "STRING":
            return self._string(token)
        if token.type == "NUMBER":
            try:
                return lexical.parse_number(str(token))
            except ValueError as exc:
                raise _error(QuerySemanticError, str(exc), token) from None
        return {"TRUE": True, "FALSE": False, "NULL": None}[token.type]

    def _string(self, token: Token) -> str:
        try:
            return lexical.unquote(str(token))
        except ValueError as exc:
            raise _error(QuerySyntaxError, str(exc), token) from None

    # other clauses ------------------------------------------------------------------------------------------

    def _clause_partition(self, tree: ParseTree) -> dict[str, object]:
        attrs = []
        for j, attr in enumerate(_subtrees(tree, "attr")):
            self._mark(("partition", j), _first_token(attr))
            attrs.append(self._attr(attr))
        return {"partition_by": tuple(attrs)}

    def _clause_within_time(self, tree: ParseTree) -> dict[str, object]:
        keyword, number, unit = _tokens(tree)
        self._mark(("within",), keyword)
        self._mark(("within_value",), number)
        try:
            micros = temporal.duration_micros(str(number), str(unit))
        except ValueError as exc:
            bad = unit if str(unit).lower() not in temporal.UNITS else number
            raise _error(QuerySyntaxError if bad is unit else QuerySemanticError, str(exc), bad) from None
        return {"within": WithinTime(micros)}

    def _clause_within_events(self, tree: ParseTree) -> dict[str, object]:
        keyword, number, _ = _tokens(tree)
        self._mark(("within",), keyword)
        self._mark(("within_value",), number)
        if not str(number).lstrip("-").isdigit():
            raise _error(QuerySemanticError, f"WITHIN n EVENTS needs a whole number, not {number}", number)
        return {"within": WithinEvents(int(str(number)))}

    def _clause_between(self, tree: ParseTree) -> dict[str, object]:
        keyword, start, _, end = _tokens(tree)
        self._mark(("between",), keyword)
        self._mark(("between_start",), start)
        self._mark(("between_end",), end)
        bounds = []
        for token in (start, end):
            try:
                bounds.append(temporal.iso_to_micros(self._string(token)))
            except ValueError as exc:
                raise _error(QuerySemanticError, f"BETWEEN: {exc}", token) from None
        return {"between": Between(bounds[0], bounds[1])}

    def _clause_strategy(self, tree: ParseTree) -> dict[str, object]:
        name = _tokens(tree)[1]
        self._mark(("strategy",), name)
        try:
            return {"strategy": Strategy(str(name).lower())}
        except ValueError:
            valid = ", ".join(s.value for s in Strategy)
            message = f"unknown strategy '{name}'; expected one of {valid}"
            raise _error(QuerySyntaxError, message, name) from None

    def _clause_returns(self, tree: ParseTree) -> dict[str, object]:
        tokens = _tokens(tree)
        name = tokens[1]
        self._mark(("returns",), name)
        try:
            out: dict[str, object] = {"returns": Return(str(name).lower())}
        except ValueError:
            valid = ", ".join(r.value for r in Return)
            message = f"unknown RETURN '{name}'; expected one of {valid}"
            raise _error(QuerySyntaxError, message, name) from None
        if len(tokens) > 2:  # RETURN next k
            number = tokens[2]
            self._mark(("following",), number)
            out["following"] = self._count(number, "RETURN next k")
        for by in _subtrees(tree, "return_by"):
            keyword, var, _dot, *rest = _tokens(by)
            self._mark(("group_by",), var)
            field = out["group_by"] = Field(str(var), self._attr(_subtrees(by, "attr")[0]))
            if rest:
                word, number = rest
                if str(word).lower() != "top":
                    raise _error(QuerySyntaxError, f"unexpected '{word}' after BY {field.var}.{field.attr}; "
                                 "expected TOP k", word)
                self._mark(("top",), number)
                out["top"] = self._count(number, "TOP k")
        for within in _subtrees(tree, "return_within"):
            keyword, number, unit = _tokens(within)
            self._mark(("following_within",), number)
            try:
                out["following_within"] = temporal.duration_micros(str(number), str(unit))
            except ValueError as exc:
                bad = unit if str(unit).lower() not in temporal.UNITS else number
                raise _error(QuerySyntaxError if bad is unit else QuerySemanticError, str(exc), bad) from None
        return out

    @staticmethod
    def _count(token: Token, what: str) -> int:
        if not str(token).isdigit():
            raise _error(QuerySemanticError, f"{what} needs a whole number, not {token}", token)
        return int(str(token))


def _element(kind: str, variables: tuple[Var, ...]) -> Element:
    if kind == "single":
        return Single(variables[0])
    if kind == "event_set":
        return EventSet(variables)
    if kind == "any_of":
        return AnyOf(variables)
    return Absent(variables)


# --------------------------------------------------------------------------------------------- Lark errors


def _syntax_error(exc: UnexpectedInput, text: str) -> QuerySyntaxError:
    """A Lark error in words: what was found where, and what would have been valid there."""
    if isinstance(exc, UnexpectedCharacters):
        char = text[exc.pos_in_stream]  # type: ignore[index]  # Lark types it optional; this subclass sets it
        if char in "'\"":
            return QuerySyntaxError(f"unterminated quoted string; expected a closing {char}", line=exc.line,
                                    column=exc.column)
        found, expected = f"character {char!r}", _acceptable(exc)
        line, column = exc.line, exc.column
    elif isinstance(exc, UnexpectedToken) and exc.token.type != "$END":
        token = exc.token
        found, expected = _describe(token), set(exc.accepts or exc.expected or ())
        line, column = token.line, token.column
    else:
        found = "end of query"
        expected = set(getattr(exc, "accepts", None) or getattr(exc, "expected", None) or ())
        line, column = _end_position(text)
    message = f"unexpected {found}; expected {_words(expected)}" + _keyword_hint(exc, text, expected)
    if expected & {"RSQB", "MINUS", "DOTDOT"}:
        message += (" (a Kleene run is indexed by i, 1, i-1 or last, as in a[i-1].x, and a[..i-1] is its "
                    "events before the current one; SASE+'s a[a.LEN] is a[last])")
    return QuerySyntaxError(message, line=line, column=column)


_KEYWORD_BEFORE = re.compile(r"([A-Za-z_][A-Za-z0-9_:]*)\s*\Z")


def _keyword_hint(exc: UnexpectedInput, text: str, expected: set[str]) -> str:
    """Most confusing errors come from a word read as a keyword (or as a type) against the writer's intent."""
    if isinstance(exc, UnexpectedToken) and exc.token.type != "$END":
        if exc.token.type in lexical.KEYWORDS_UPPER and "IDENT" in expected:
            return f" (quote it, e.g. '{exc.token}', to use a keyword as a name)"
        offset = exc.token.start_pos
    elif isinstance(exc, UnexpectedCharacters):
        offset = exc.pos_in_stream
    else:
        return ""
    before = _KEYWORD_BEFORE.search(text[:offset] if offset is not None else "")
    if before is None or before.group(1).lower() not in lexical.KEYWORDS:
        return ""
    previous = before.group(1)
    if expected == {"LPAR"}:
        return (f" ('{previous}' is read as the keyword {previous.upper()}; quote it, e.g. '{previous}', to "
                "use it as an event type)")
    if isinstance(exc, UnexpectedToken) and exc.token.type == "LPAR":
        return (f" ('{previous}' is read as an event type here: SEQ(…) cannot be nested, and {{…}}, AND, OR "
                "and NOT hold variables only)")
    return ""


def _acceptable(exc: UnexpectedCharacters) -> set[str]:
    """The terminals the parser can take here; the lexer's own set is wider (LALR lookaheads are merged)."""
    interactive = getattr(exc, "interactive_parser", None)
    if interactive is not None:
        try:
            return set(interactive.accepts())
        except UnexpectedInput:  # defensive: fall back to the lexer's view
            pass
    return set(exc.allowed or ())


def _describe(token: Token) -> str:
    if token.type == "IDENT":
        return f"name '{token}'"
    if token.type == "STRING":
        shown = str(token) if len(token) <= 40 else str(token)[:37] + "…"
        return f"string {shown}"
    if token.type == "NUMBER":
        return f"number {token}"
    if token.type in lexical.KEYWORDS_UPPER:
        return f"keyword {str(token).upper()}"
    return f"'{token}'"


def _words(terminals: set[str]) -> str:
    order = list(_TERMINAL_WORDS)
    known = sorted((t for t in terminals if t in _TERMINAL_WORDS), key=order.index)
    words = [_TERMINAL_WORDS[t] for t in known] or ["something else"]
    if len(words) == 1:
        return words[0]
    return "one of " + ", ".join(words[:-1]) + " or " + words[-1]


def _end_position(text: str) -> tuple[int, int]:
    line = text.count("\n") + 1
    return line, len(text) - (text.rfind("\n") + 1) + 1

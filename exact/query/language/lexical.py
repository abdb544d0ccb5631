"""Lexical rules shared by the parser, the printer and the JSON form: names, keywords, quoting, literals.

Everything here is a pure function of its arguments, so text printed by :mod:`exact.query.language.printer` reads
back through :mod:`exact.query.language.parser` to the same value (the round-trip guarantee of docs/contract.md §2).
"""

from __future__ import annotations

import math
import re
import unicodedata

#: An unquoted name (type, variable, attribute): a letter or ``_``, then letters, digits, ``_`` or ``:``
#: (``org:resource`` in XES logs).  Matches the ``IDENT`` terminal of ``query.lark``.
IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_:]*\Z")

#: Every keyword of the grammar (case-insensitive).  An unquoted type or attribute equal to one of them is
#: printed quoted, so it can never be read as the keyword.
KEYWORDS = frozenset({
    "pattern", "seq", "and", "or", "not", "any", "where", "prev", "true", "false", "null", "partition", "by",
    "within", "events", "event", "between", "strategy", "return",
})

#: Words that cannot be variable names: they would read as keywords where a variable name may stand.
#: ``any`` is allowed: it is the default name of an ``ANY`` variable and never ambiguous.
RESERVED_NAMES = KEYWORDS - {"any"}

#: Signed 64-bit range of integer literals (the event store keeps int64 attributes).
INT_MIN, INT_MAX = -(2**63), 2**63 - 1

_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r", "0": "\0"}
_ESCAPE_RE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.S)
_INVALID_NAME_RUN = re.compile(r"[^a-z0-9_]+")


def is_identifier(text: str) -> bool:
    return bool(IDENT_RE.match(text))


def is_valid_variable_name(name: str) -> bool:
    return is_identifier(name) and name.lower() not in RESERVED_NAMES


def needs_quotes(word: str) -> bool:
    """Whether a type or attribute name must be quoted to read back as itself."""
    return not is_identifier(word) or word.lower() in KEYWORDS


def quote(text: str) -> str:
    """Single-quoted string literal with backslash escapes for ``\\``, ``'`` and control characters."""
    out = []
    for ch in text:
        if ch == "\\" or ch == "'":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"


def unquote(token: str) -> str:
    """The value of a quoted string token; raises ValueError naming a bad escape."""
    body = token[1:-1]

    def replace(match: re.Match[str]) -> str:
        code = match.group(1)
        if len(code) == 5 and code[0] == "u":
            return chr(int(code[1:], 16))
        if code in _ESCAPES:
            return _ESCAPES[code]
        raise ValueError(f"unknown escape '\\{code}' in a quoted string (use \\\\, \\', \\\", \\n, \\t, \\r, "
                         "\\0 or \\uXXXX)")

    return _ESCAPE_RE.sub(replace, body)


def word(text: str) -> str:
    """A type name as written in a query: bare when possible, else quoted."""
    return quote(text) if needs_quotes(text) else text


def attribute(text: str) -> str:
    """An attribute name as written in a query.  After ``.`` and in PARTITION BY no keyword can stand, so the
    contextual lexer reads any identifier there as a name (``a.seq``, ``a.not``); only non-identifiers are
    quoted."""
    return text if is_identifier(text) else quote(text)


def default_name_base(type_name: str | None) -> str:
    """The default variable name of a type (docs/contract.md §2: the type lower-cased), made a valid identifier.

    Deterministic rule: lower-case; decompose accents (``é`` → ``e``); replace every run of characters other
    than ``a-z``, ``0-9`` and ``_`` by one ``_``; if the result is empty, starts with a digit or is a reserved
    word, prefix ``v_``.  ``'W_Completeren aanvraag'`` → ``w_completeren_aanvraag``; ``ANY`` → ``any``.
    """
    if type_name is None:
        return "any"
    decomposed = unicodedata.normalize("NFKD", type_name.lower())
    stripped = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    base = _INVALID_NAME_RUN.sub("_", stripped)
    if not base or base[0].isdigit() or base in RESERVED_NAMES:
        base = "v_" + base if base else "v"
    return base


def assign_default_names(declared: list[tuple[str | None, str | None]]) -> list[str]:
    """Names for ``(type, explicit name or None)`` in pattern order.

    Explicit names are kept.  An unnamed variable gets :func:`default_name_base` of its type, or, when that is
    taken (by an explicit name or an earlier default), the base with the smallest free suffix ``_2``, ``_3`` …
    so ``SEQ(A, A, A)`` names ``a``, ``a_2``, ``a_3``.
    """
    taken = {name for _, name in declared if name is not None}
    names = []
    for type_name, name in declared:
        if name is None:
            base = default_name_base(type_name)
            name, k = base, 2
            while name in taken:
                name, k = f"{base}_{k}", k + 1
            taken.add(name)
        names.append(name)
    return names


def parse_number(text: str) -> int | float:
    """An int when the literal has no fraction or exponent, else a float; ValueError when out of range."""
    if any(c in text for c in ".eE"):
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"number {text} is too large")
        return value
    digits = text.lstrip("+-").lstrip("0")
    if len(digits) > 19:  # (before int(): Python refuses to convert thousands of digits, with a word of its own)
        shown = text if len(text) <= 40 else f"{text[:20]}… ({len(digits)} digits)"
        raise ValueError(f"integer {shown} is outside the signed 64-bit range")
    number = int(text)
    if not INT_MIN <= number <= INT_MAX:
        raise ValueError(f"integer {text} is outside the signed 64-bit range")
    return number


def format_scalar(value: str | int | float | bool | None) -> str:
    """A literal as query text; floats print with ``repr`` so they read back bit for bit."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, float):
        text = repr(value)
        return text if any(c in text for c in ".eE") else text + ".0"
    return str(value)

#: Terminal names of the keywords in ``query.lark`` (each is its keyword upper-cased).
KEYWORDS_UPPER = frozenset(k.upper() for k in KEYWORDS)

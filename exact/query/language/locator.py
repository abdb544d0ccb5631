"""Where a piece of a query is, for its errors: a :data:`Key` names the piece, a :class:`Locator` turns it
into the error's position (line and column for text queries, :class:`TokenLocator`; none for JSON)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from exact.errors import SeqsketchError

#: A key naming a piece of a query: ``("var", i)`` is the i-th variable in pattern order,
#: ``("operand", j, 0)`` the left operand of condition j, and so on (see :class:`Locator`).
Key = tuple[Any, ...]


class Locator:
    """Turns a :data:`Key` into the position arguments of an error.

    Keys: ``("query",)``, ``("element", k)``, ``("var", i)``, ``("var_name", i)``, ``("var_type", i)``,
    ``("cond", j)``, ``("op", j)``, ``("operand", j, side)``, ``("operand_var", j, side)``,
    ``("partition", j)``, ``("within",)``, ``("within_value",)``, ``("between",)``, ``("between_start",)``,
    ``("between_end",)``,
    ``("strategy",)``, ``("returns",)``.  Subclasses resolve them; unknown keys fall back to coarser ones.
    """

    def position(self, key: Key) -> dict[str, Any]:
        return {}

    def error(self, cls: type[SeqsketchError], message: str, key: Key) -> SeqsketchError:
        return cls(message, **self.position(key))


class TokenLocator(Locator):
    """Positions of text queries: ``key → (line, column)`` as recorded by the parser."""

    def __init__(self, positions: dict[Key, tuple[int, int]]) -> None:
        self._positions = positions

    def position(self, key: Key) -> dict[str, Any]:
        for candidate in _coarser(key):
            if candidate in self._positions:
                line, column = self._positions[candidate]
                return {"line": line, "column": column}
        return {"line": 1, "column": 1}


def _coarser(key: Key) -> Iterator[Key]:
    """``key`` then the keys of the pieces that contain it, so a missing position degrades gracefully."""
    yield key
    kind = key[0]
    if kind in ("var_name", "var_type"):
        yield ("var", key[1])
    elif kind == "operand_var":
        yield ("operand", key[1], key[2])
        yield ("cond", key[1])
    elif kind in ("op", "operand"):
        yield ("cond", key[1])
    elif kind == "within_value":
        yield ("within",)
    elif kind in ("between_start", "between_end"):
        yield ("between",)
    yield ("query",)

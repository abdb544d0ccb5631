"""Errors a user can cause, each with a stable code, a message naming what is wrong and where.

Every layer raises these (or subclasses); the CLI prints ``str(error)`` as one line on stderr and the HTTP API
serialises ``to_dict()`` as ``{"error": {...}}`` with ``http_status``.  Anything else escaping is a bug.
"""

from __future__ import annotations

import errno
from typing import Any


class SeqsketchError(Exception):
    code = "error"
    http_status = 400

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None,
                 where: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column
        self.where = where  # a file, record or field the error is about

    @property
    def position(self) -> dict[str, int] | None:
        if self.line is None:
            return None
        pos = {"line": self.line}
        if self.column is not None:
            pos["column"] = self.column
        return pos

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": str(self)}
        if self.position is not None:
            out["position"] = self.position
        return out

    def __str__(self) -> str:
        parts = []
        if self.where:
            parts.append(self.where)
        if self.line is not None:
            parts.append(f"line {self.line}" + (f", column {self.column}" if self.column is not None else ""))
        prefix = ": ".join(parts)
        return f"{prefix}: {self.message}" if prefix else self.message


class InputError(SeqsketchError):
    """A malformed input file or record: names the file, the line/record and the field."""

    code = "bad_input"


class QuerySyntaxError(SeqsketchError):
    code = "query_syntax"


class QuerySemanticError(SeqsketchError):
    code = "query_semantic"


class QueryLimitError(SeqsketchError):
    """A query too large or too deeply nested to accept, or over a per-query limit."""

    code = "query_limit"


class TooLarge(SeqsketchError):
    """Work refused before it starts because it would need more memory than it may take."""

    code = "too_large"


class NotFound(SeqsketchError):
    code = "not_found"
    http_status = 404


class Conflict(SeqsketchError):
    """The request contradicts the dataset's state (e.g. exists already; an append goes back in time)."""

    code = "conflict"
    http_status = 409


class IndexCorrupt(SeqsketchError):
    """A persisted index failed its checksum or format check; it is never used silently."""

    code = "index_corrupt"
    http_status = 500


class StoreCorrupt(SeqsketchError):
    """An event-store part that fails its size or page-checksum check, or cannot be decoded; never used."""

    code = "store_corrupt"
    http_status = 500


class StorageUnavailable(SeqsketchError):
    """The object store holding a dataset could not be reached (or refused the request): nothing is damaged,
    and the same request answers once it is back."""

    code = "storage_unavailable"
    http_status = 503


class OutOfResources(SeqsketchError):
    """The server ran out of open files or memory while answering: nothing is damaged, and the same request
    answers once load falls (or the operator raises ``ulimit -n``).  Never reported as damage."""

    code = "out_of_resources"
    http_status = 503
    headers = {"Retry-After": "1"}


#: the errnos of a process out of resources (open files, the system's file table, memory), not of damage
_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})


def out_of_resources(err: BaseException) -> OutOfResources | None:
    """``err`` as :class:`OutOfResources` when it, or an error it was raised from or during (a layer that
    reported it as damage or as missing), is the process running out of open files or memory; else None."""
    seen: set[int] = set()
    at: BaseException | None = err
    while at is not None and id(at) not in seen:
        seen.add(id(at))
        if isinstance(at, OSError) and at.errno in _EXHAUSTED:
            found = OutOfResources(f"the server is out of {'memory' if at.errno == errno.ENOMEM else 'open files'}"
                                   f" ({at.strerror}); retry, or raise its limit (ulimit -n)")
            return found
        at = at.__cause__ or at.__context__
    return None

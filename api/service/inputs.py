"""Where inputs come from: the server's input roots (build inputs are confined to them) and the project's
shared real data (the demo log, the default input root)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from exact.errors import InputError, SeqsketchError

#: The repository (or installed site) holding the ``api`` package.
_REPO = Path(__file__).resolve().parents[2]


class InputNotAllowed(SeqsketchError):
    """A build input outside every configured input root (or escaping one with ``..`` or a symlink)."""

    code = "input_not_allowed"
    http_status = 403


def shared_data_dirs() -> list[Path]:
    """Where the project's real data (``shared/data``) may be: ``$SEQSKETCH_SHARED_DATA`` alone when set,
    else beside this checkout, beside the working directory, or beside the local repository this checkout
    was cloned from (a fresh clone made elsewhere)."""
    explicit = os.environ.get("SEQSKETCH_SHARED_DATA")
    if explicit:
        return [Path(explicit)]
    bases = [_REPO.parent, Path.cwd()]
    try:
        origin = subprocess.run(["git", "-C", str(_REPO), "config", "--get", "remote.origin.url"],
                                capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        origin = ""
    if origin and Path(origin).is_dir():
        bases.append(Path(origin).resolve().parent)
    return [base / "shared" / "data" for base in bases]


def default_input_roots(home: Path) -> list[Path]:
    """The shared data directory beside the repository (when present) and ``<home>/inputs``."""
    roots = []
    shared = _REPO.parent / "shared" / "data"
    if shared.is_dir():
        roots.append(shared)
    roots.append(home / "inputs")
    return roots


def input_roots_from_env(home: Path, value: str | None = None) -> list[Path]:
    """``$SEQSKETCH_INPUT_ROOTS`` (``os.pathsep``-separated) or :func:`default_input_roots`."""
    value = os.environ.get("SEQSKETCH_INPUT_ROOTS") if value is None else value
    if value:
        return [Path(p) for p in value.split(os.pathsep) if p]
    return default_input_roots(home)


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


#: where on object storage a server may read build inputs: comma-separated ``s3://bucket/prefix`` (none unless
#: set)
INPUT_BUCKETS_ENV = "SEQSKETCH_INPUT_BUCKETS"


def resolve_remote_input(spec: str) -> str:
    """An input on object storage (``s3://bucket/key``), allowed only under a prefix ``SEQSKETCH_INPUT_BUCKETS``
    names (:class:`InputNotAllowed` otherwise, and for ``.``/``..`` segments), that must exist."""
    from exact.readers.sources import source_exists
    from exact.store.objects import ObjectLocation

    location = ObjectLocation.parse(spec)  # (no '.', '..' or empty segments)
    allowed = [ObjectLocation.parse(p.strip()) for p in os.environ.get(INPUT_BUCKETS_ENV, "").split(",")
               if p.strip()]
    inside = any(a.bucket == location.bucket and (not a.prefix or location.prefix.startswith(a.prefix + "/"))
                 for a in allowed)
    if not inside:
        raise InputNotAllowed(f"input is not under a bucket prefix the server may read ({INPUT_BUCKETS_ENV})",
                              where=f"inputs: {spec!r}")
    if not source_exists(location.uri):
        raise InputError("no such object", where=f"inputs: {spec!r}")
    return location.uri


def resolve_input(spec: str, roots: Sequence[Path]) -> Path | str:
    """The real path of build input ``spec``, which must lie inside one of ``roots``.

    A relative ``spec`` is looked up under each root in order; an absolute one must already point inside a
    root.  Paths are resolved (``..`` and symlinks followed) *before* the containment check, so neither can
    reach outside.  Raises :class:`InputNotAllowed` (403) for a path outside every root and
    :class:`~exact.errors.InputError` for one that does not exist.  An input on object storage
    (:func:`resolve_remote_input`) stays its ``s3://`` text.
    """
    if spec.startswith("s3://"):
        return resolve_remote_input(spec)
    real_roots = [r.resolve() for r in roots]
    if "\x00" in spec:
        raise InputNotAllowed("input path contains a NUL byte", where=f"inputs: {spec!r}")
    path = Path(spec)
    candidates = [path.resolve()] if path.is_absolute() else [(r / path).resolve() for r in real_roots]
    escaped = False
    for candidate in candidates:
        if not any(_inside(candidate, r) for r in real_roots):
            escaped = True  # '..' or a symlink leads out of the root
        elif candidate.is_file():
            return candidate
    if escaped:
        raise InputNotAllowed(
            "input is outside the server's input roots (SEQSKETCH_INPUT_ROOTS); give a path relative to "
            "a root, without '..' or links leading out of it", where=f"inputs: {spec!r}")
    raise InputError("no such input file under the server's input roots", where=f"inputs: {spec!r}")


def resolve_inputs(specs: Iterable[str], roots: Sequence[Path]) -> list[Path | str]:
    return [resolve_input(spec, roots) for spec in specs]


def allowed_inputs(roots: Sequence[Path], *, limit: int = 500) -> list[str]:
    """The files a build may name, relative to their root (for a console's build form), at most ``limit``."""
    out: list[str] = []
    for root in roots:
        real = root.resolve()
        if not real.is_dir():
            continue
        for path in sorted(real.rglob("*")):
            if len(out) >= limit:
                return out
            if path.is_file() and not path.name.startswith(".") and _inside(path.resolve(), real):
                out.append(path.relative_to(real).as_posix())
    return out

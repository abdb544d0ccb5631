"""The kernels made from their plain functions: compiled by numba, or left as plain Python.

The modules of this package hold plain Python functions that call each other by name.  :func:`build` copies
every function of the modules it is given into one namespace, where each name stands for its copy, and
returns the copies of the entry points:

* ``python=False`` (:func:`compiled`): every copy is a numba function (``njit``, ``nogil``), so a call to a
  part inside a kernel is a compiled call; the parts called for every event or node (:data:`HOT`) are
  inlined by numba itself, as a call would pass each array of the named tuples they take one by one (the
  kernels ran a fifth to a half slower without).  The entry points are cached on disk, where
  numba would put a ``cache=True`` function's machine code (beside the module in ``__pycache__``, in
  ``NUMBA_CACHE_DIR`` when set, or in numba's user cache directory when the package is not writable), but
  keyed on a digest of the sources of *all* the modules (:func:`source_digest`): numba's own key is the
  source of the one file a function is written in, while a kernel's machine code holds its parts too.  A
  change to any part compiles the kernels again, once.
* ``python=True`` (:func:`python_kernels`): the copies stay Python functions and ``PYTHON`` is true in their
  namespace, so the run rows hold Python's unbounded integers — the same kernels, exact and slow, for the
  rare query whose integer sums leave int64.

numba is imported only when compiled kernels are first asked for.
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import inspect
import logging
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import exact.engine.kernels.layout as layout
import exact.engine.kernels.runs as runs
import exact.engine.kernels.strategies as strategies
import exact.engine.kernels.transitions as transitions
import exact.engine.kernels.values as values
import exact.engine.kernels.windows as windows
from exact.engine.kernels.layout import Arrays

#: The modules the kernels are made of, parts first.
MODULES = (layout, values, runs, transitions, windows, strategies)
#: The parts a strategy loop calls for every event or node, inlined into it by numba (``inline="always"``):
#: as calls they would be passed every array of the named tuples they take, field by field, each time.
HOT = ("fires", "next_event", "bind", "compare", "reportable", "emit", "exists_found", "over_budget", "open_window",
       "close_window", "call_done", "end_call", "begin_call", "new_nodes", "abandon", "flush")


class Kernels(NamedTuple):
    """The strategy kernels (:mod:`exact.engine.kernels.strategies`), compiled or plain."""

    next_match: Callable[..., Arrays]
    robust_next_match: Callable[..., Arrays]
    any_match: Callable[..., Arrays]
    contiguous: Callable[..., Arrays]


@functools.cache
def compiled() -> Kernels:
    """The kernels compiled by numba (each on its first call, or loaded from the disk cache)."""
    return Kernels(**build(MODULES, Kernels._fields, python=False, inline=HOT))


@functools.cache
def python_kernels() -> Kernels:
    """The same kernels as plain Python, with Python's unbounded integers in the run rows (``PYTHON``)."""
    return Kernels(**build(MODULES, Kernels._fields, python=True))


def build(modules: Sequence[types.ModuleType], entries: Sequence[str], *, python: bool,
          inline: Sequence[str] = ()) -> dict[str, Callable[..., Arrays]]:
    """The functions named ``entries`` made from the plain functions of ``modules`` (see the module
    docstring): numba functions cached under :func:`source_digest` of ``modules`` (those named in ``inline``
    inlined where they are called), or Python ones."""
    namespace = _namespace(modules)
    namespace["PYTHON"] = python
    own = [(name, f) for m in modules for name, f in vars(m).items()
           if isinstance(f, types.FunctionType) and f.__module__ == m.__name__]
    if not python:
        from numba import njit
    for name, f in own:
        copy = types.FunctionType(f.__code__, namespace, f.__name__, f.__defaults__, f.__closure__)
        copy.__module__, copy.__qualname__, copy.__doc__ = f.__module__, f.__qualname__, f.__doc__
        namespace[name] = copy if python else njit(nogil=True, inline="always" if name in inline else "never")(copy)
    if not python:
        digest = source_digest(modules)
        for name in entries:
            kernel = namespace[name]
            try:
                kernel._cache = _digest_cache(kernel.py_func, digest)
            except (AttributeError, ImportError, TypeError) as err:
                _uncached(err)  # (the kernel keeps numba's own: no cache, compiled in each process)
                break
    return {name: namespace[name] for name in entries}


def _uncached(err: BaseException) -> None:
    """Say, loudly, that the kernels compile uncached: the numba installed has moved the private names the
    digest-stamped cache is made of (the project pins numba's minor version for that reason)."""
    import warnings

    import numba

    message = (f"numba {numba.__version__}'s cache internals are not what exact/engine/kernels/factory.py "
               f"expects ({type(err).__name__}: {err}): the engine's kernels compile uncached, in every process "
               "— correct, but each start pays the compilation; install the numba version pyproject.toml pins")
    logging.getLogger(__name__).warning(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def source_digest(modules: Sequence[types.ModuleType]) -> str:
    """A digest of the source files of ``modules`` and of this factory: the kernels' cache key."""
    h = hashlib.sha256()
    for path in [inspect.getfile(m) for m in modules] + [__file__]:
        h.update(Path(path).read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def _namespace(modules: Sequence[types.ModuleType]) -> dict[str, Any]:
    """The globals of ``modules`` merged (a name two modules bind must be one object in both)."""
    namespace: dict[str, Any] = {}
    for m in modules:
        for name, value in vars(m).items():
            if name.startswith("__"):
                continue
            if name in namespace and namespace[name] is not value:
                raise ValueError(f"{m.__name__} binds {name!r} to something else than another kernel module")
            namespace[name] = value
    # a module numba imports to rebuild a cached kernel's environment; the builtins for the plain variant
    namespace["__name__"] = __name__
    namespace["__builtins__"] = builtins
    return namespace


def _digest_cache(py_func: Callable[..., Arrays], digest: str) -> Any:  # a numba FunctionCache
    """numba's cache for ``py_func`` in numba's usual places, with ``digest`` as the source stamp that must
    match for cached machine code to be used (numba's own stamp: ``py_func``'s file alone).  A
    ``NUMBA_CACHE_LOCATOR_CLASSES`` setting, if any, takes precedence, as it does for every numba cache."""
    from numba.core import caching

    def stamped(base: str) -> type:
        cls = getattr(caching, base, None) or getattr(caching, "_" + base)
        return type(base, (cls,), {"get_source_stamp": lambda self: digest})

    impl = type("KernelCacheImpl", (caching.CompileResultCacheImpl,), {
        "_locator_classes": [stamped("UserProvidedCacheLocator"), stamped("InTreeCacheLocator"),
                             stamped("UserWideCacheLocator")]})
    return type("KernelCache", (caching.FunctionCache,), {"_impl_class": impl})(py_func)

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

Some parts are *spliced* rather than called (:data:`SPLICED`, :func:`splice`): the statement that calls one
is replaced, in the source of its caller, by the part's body.  An inlined numba call binds each of its
parameters to a new variable, which takes a reference to every array of the named tuples passed; where
the part holds a call numba cannot see through, those references are taken and dropped again on every
call (atomic counts: a shared step of the strategies cost the kernels up to a third of their time).  A
spliced part names its caller's own variables, so it costs what the same lines written in place cost, and
the strategies still share one copy of them.

numba is imported only when compiled kernels are first asked for.
"""

from __future__ import annotations

import ast
import builtins
import copy
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
HOT = ("holds", "push", "short", "next_event", "bind", "compare",
       "reportable", "emit", "exists_found", "over_budget", "open_window", "close_window", "call_done", "end_call",
       "begin_call", "new_nodes", "abandon", "flush")
#: The parts spliced into the functions that call them (:func:`splice`): the step every strategy takes for
#: every event, and the search for the next event a table of instances can use.
SPLICED = ("step", "earliest")


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
    parts = {name: _definition(f) for name, f in own if name in SPLICED}
    for name, f in own:
        code = _spliced_code(f, parts) or f.__code__
        made = types.FunctionType(code, namespace, f.__name__, f.__defaults__, f.__closure__)
        made.__module__, made.__qualname__, made.__doc__ = f.__module__, f.__qualname__, f.__doc__
        namespace[name] = made if python else njit(nogil=True, inline="always" if name in inline else "never")(made)
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


def _definition(f: types.FunctionType) -> ast.FunctionDef:
    """The syntax tree of ``f``'s definition, with the line numbers of its file."""
    lines, first = inspect.getsourcelines(f)  # (the kernels' functions are all defined at a module's top)
    tree = ast.parse("".join(lines))
    ast.increment_lineno(tree, first - 1)
    definition = tree.body[0]
    assert isinstance(definition, ast.FunctionDef)
    return definition


def _spliced_code(f: types.FunctionType, parts: dict[str, ast.FunctionDef]) -> types.CodeType | None:
    """The code of ``f`` with every call of a part in ``parts`` spliced (:func:`splice`); None when ``f``
    calls none."""
    if f.__name__ in parts or not parts.keys() & set(f.__code__.co_names):
        return None
    definition = splice(_definition(f), parts)
    module = ast.fix_missing_locations(ast.Module(body=[definition], type_ignores=[]))
    scope: dict[str, Any] = {}
    exec(compile(module, inspect.getfile(f), "exec"), {"__builtins__": builtins}, scope)  # noqa: S102
    code: types.CodeType = scope[f.__name__].__code__
    return code


def splice(caller: ast.FunctionDef, parts: dict[str, ast.FunctionDef]) -> ast.FunctionDef:
    """``caller`` with each statement ``target = part(args)`` (or ``part(args)``) replaced by the part's body.

    A part's parameters become its arguments: a name, a constant, or an attribute of a name, when the
    part never assigns the parameter; a local ``<part>_<parameter>`` set from the argument otherwise.
    Every other local of the part is renamed ``<part>_<local>``.  The part must end in its one ``return``,
    whose value becomes ``target``'s.  The caller's annotations and decorators are dropped (the kernels'
    functions have none that run)."""
    caller = copy.deepcopy(caller)
    caller.decorator_list = []
    caller.returns = None
    for arg in caller.args.args:
        arg.annotation = None
    caller.body = _spliced_body(caller.body, parts)
    return caller


def _spliced_body(body: list[ast.stmt], parts: dict[str, ast.FunctionDef]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for statement in body:
        call, target = _part_call(statement, parts)
        if call is None:
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(statement, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    setattr(statement, field, _spliced_body(inner, parts))
            out.append(statement)
            continue
        assert isinstance(call.func, ast.Name)
        out.extend(_expanded(parts[call.func.id], call, target, statement))
    return out


def _part_call(statement: ast.stmt, parts: dict[str, ast.FunctionDef]) -> tuple[ast.Call | None, ast.expr | None]:
    """The call of a part that ``statement`` is, and what it assigns (None: a bare call)."""
    value = statement.value if isinstance(statement, ast.Assign | ast.Expr) else None
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in parts:
        if isinstance(statement, ast.Assign):
            if len(statement.targets) != 1:
                raise ValueError(f"line {statement.lineno}: a spliced part's value goes to one target")
            return value, statement.targets[0]
        return value, None
    return None, None


def _expanded(part: ast.FunctionDef, call: ast.Call, target: ast.expr | None, at: ast.stmt) -> list[ast.stmt]:
    """The statements that stand for ``target = part(*call.args)``."""
    params = [a.arg for a in part.args.args]
    if call.keywords or len(call.args) != len(params):
        raise ValueError(f"line {at.lineno}: {part.name}() is spliced: pass its {len(params)} arguments by position")
    *body, last = part.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if not isinstance(last, ast.Return) or any(isinstance(n, ast.Return) for s in body for n in ast.walk(s)):
        raise ValueError(f"{part.name}() is spliced: it must end in its only return")
    stored = {n.id for s in part.body for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    names: dict[str, ast.expr] = {}
    prologue: list[ast.stmt] = []
    for param, arg in zip(params, call.args, strict=True):
        if param not in stored and _plain(arg):
            names[param] = arg
        else:
            local = f"{part.name}_{param}"
            names[param] = ast.Name(id=local, ctx=ast.Load())
            prologue.append(ast.Assign(targets=[ast.Name(id=local, ctx=ast.Store())], value=copy.deepcopy(arg)))
    for local in stored - set(params):
        names[local] = ast.Name(id=f"{part.name}_{local}", ctx=ast.Load())
    renamed = [_Renamer(names).visit(copy.deepcopy(s)) for s in body]
    ending: list[ast.stmt] = []
    if target is not None and last.value is not None:
        ending = [ast.Assign(targets=[target], value=_Renamer(names).visit(copy.deepcopy(last.value)))]
    statements = prologue + renamed + ending
    for s in statements:
        ast.copy_location(s, at)
    return statements


def _plain(arg: ast.expr) -> bool:
    """Can ``arg`` stand in the part's body as it is: a name, a constant, or an attribute of a name?"""
    return (isinstance(arg, ast.Name | ast.Constant)
            or isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name))


class _Renamer(ast.NodeTransformer):
    """Replace the names of a part's parameters and locals by what stands for them at a call."""

    def __init__(self, names: dict[str, ast.expr]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.expr:
        stand = self.names.get(node.id)
        if stand is None:
            return node
        if isinstance(node.ctx, ast.Store):
            assert isinstance(stand, ast.Name)
            return ast.copy_location(ast.Name(id=stand.id, ctx=ast.Store()), node)
        return ast.copy_location(copy.deepcopy(stand), node)


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

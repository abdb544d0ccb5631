"""The kernel factory (exact.engine.kernels.factory): its two variants give the same answers, and the compiled
kernels' disk cache is keyed on every part they are made of, so a changed part is compiled again."""

from __future__ import annotations

import os
import pkgutil
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import exact.engine.kernels as K
from exact.engine import evaluate_table
from exact.engine.kernels.factory import MODULES, SPLICED, build, source_digest
from exact.query.ast import Query, Return, Strategy
from exact.reference import stream_table
from tests.generators import engine_queries, engine_streams, run_queries

REPO = Path(__file__).resolve().parents[2]


def _answers(query: Query, table: pa.Table) -> tuple:
    """What the kernels answer for ``query`` under every RETURN (the vectorised chain left out)."""
    full = evaluate_table(query, table, returns=Return.MATCHES, chains=False)
    count = evaluate_table(query, table, returns=Return.COUNT, chains=False).count
    exists = evaluate_table(query, table, returns=Return.EXISTS, chains=False).exists
    spans = evaluate_table(query, table, returns=Return.INTERVALS, chains=False).spans.tolist()
    first = evaluate_table(query, table, returns=Return.MATCHES, limit=1, chains=False).matches(1)
    return full.matches(), full.count, count, exists, spans, first


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), strategy=st.sampled_from(list(Strategy)), runs=st.booleans())
def test_plain_python_kernels_answer_as_the_compiled_ones(data: st.DataObject, strategy: Strategy,
                                                          runs: bool) -> None:
    query = data.draw(run_queries(strategy, more=True) if runs else engine_queries(strategy))
    table = stream_table(data.draw(engine_streams()))
    compiled = _answers(query, table)
    with mock.patch.object(K, "compiled", K.python_kernels):
        plain = _answers(query, table)
    assert plain == compiled, query


def test_the_variants_are_what_they_say() -> None:
    from numba.core.registry import CPUDispatcher

    assert all(isinstance(k, CPUDispatcher) for k in K.compiled())
    assert all(isinstance(k, types.FunctionType) for k in K.python_kernels())
    # the plain variant's namespace holds the plain parts, with Python's integers switched on
    assert K.python_kernels().next_match.__globals__["PYTHON"] is True
    assert isinstance(K.python_kernels().next_match.__globals__["holds"], types.FunctionType)


def test_the_cache_key_covers_every_module_of_the_kernels(tmp_path: Path) -> None:
    package = {name for _, name, _ in pkgutil.iter_modules(K.__path__)}
    assert package - {"factory"} == {m.__name__.rpartition(".")[2] for m in MODULES}
    copies = []
    for m in MODULES:
        path = tmp_path / Path(m.__file__).name
        shutil.copy(m.__file__, path)
        copy = types.ModuleType(m.__name__)
        copy.__file__ = str(path)
        copies.append(copy)
    base = source_digest(copies)
    assert base == source_digest(MODULES)
    for copy in copies:
        path = Path(copy.__file__)
        text = path.read_text()
        path.write_text(text + "\n# changed\n")
        assert source_digest(copies) != base, copy.__name__
        path.write_text(text)
    assert source_digest(copies) == base


_RUN = """
import sys
sys.path.insert(0, {tmp!r})
import part, top
from exact.engine.kernels.factory import build
kernel = build((part, top), ("top",), python=False)["top"]
print(kernel(1), sum(kernel.stats.cache_hits.values()), sum(kernel.stats.cache_misses.values()))
"""


def test_a_changed_part_is_compiled_again(tmp_path: Path) -> None:
    """numba's own cache would key ``top`` on top.py alone and run the old ``helper`` inlined in it."""
    (tmp_path / "part.py").write_text("def helper(x):\n    return x + 1\n")
    (tmp_path / "top.py").write_text("from part import helper\n\n\ndef top(x):\n    return helper(x) * 10\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("NUMBA_CACHE_DIR", None)

    def run() -> tuple[int, int, int]:
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(_RUN.format(tmp=str(tmp_path)))], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        value, hits, misses = map(int, done.stdout.split())
        return value, hits, misses

    assert run() == (20, 0, 1)  # compiled, and cached in tmp_path/__pycache__
    assert run() == (20, 1, 0)  # loaded from the cache
    (tmp_path / "part.py").write_text("def helper(x):\n    return x + 2  # changed\n")
    assert run() == (30, 0, 1)  # the part changed: compiled again
    assert run() == (30, 1, 0)


_MOVED = """
import sys, warnings
sys.path.insert(0, {tmp!r})
import numba.core.caching as caching
del caching.CompileResultCacheImpl  # (as a numba release that renamed it would have it)
import part, top
from exact.engine.kernels.factory import build
with warnings.catch_warnings(record=True) as said:
    warnings.simplefilter("always")
    kernel = build((part, top), ("top",), python=False)["top"]
print(kernel(1), sum(kernel.stats.cache_hits.values()), len(said), str(said[0].message) if said else "")
"""


def test_numba_s_cache_names_moved_compiles_uncached_and_says_so(tmp_path: Path) -> None:
    """The digest-stamped cache leans on numba's private caching names: without them the kernels still
    compile and answer, with no cache, and a warning names what moved."""
    (tmp_path / "part.py").write_text("def helper(x):\n    return x + 1\n")
    (tmp_path / "top.py").write_text("from part import helper\n\n\ndef top(x):\n    return helper(x) * 10\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    for _ in range(2):  # (the second run finds no cache either)
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(_MOVED.format(tmp=str(tmp_path)))], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        value, hits, warned, message = done.stdout.split(maxsplit=3)
        assert (value, hits, warned) == ("20", "0", "1")
        assert "CompileResultCacheImpl" in message and "compile uncached" in message
        assert "cache internals" in done.stderr  # (logged as well)
    assert not list(tmp_path.rglob("*.nbi"))  # nothing was cached


_PART = '''
import numpy as np


def step(x, total, out, scale):
    """A part with a stored parameter, a local, a loop and a docstring."""
    k = 0
    for k in range(x):
        total += k * scale
    out[0] = total
    return total, k
'''

_CALLER = '''
import numpy as np

from part import step


class Box:
    def __init__(self, out):
        self.out = out


def top(x, scale):
    out = np.zeros(1, dtype=np.int64)
    box = Box(out)
    total = 5
    k = -1  # the caller's own k: the part's k must not touch it
    total, last = step(x + 1, total, box.out, scale)
    step(x, total, out, 2)
    return total, last, k, int(out[0])


def plain(x, scale):
    out = np.zeros(1, dtype=np.int64)
    total = 5
    k = -1
    total, last = _called(x + 1, total, out, scale)
    _called(x, total, out, 2)
    return total, last, k, int(out[0])


def _called(x, total, out, scale):
    k = 0
    for k in range(x):
        total += k * scale
    out[0] = total
    return total, k
'''


def _toy(tmp_path: Path, caller: str = _CALLER, part: str = _PART) -> tuple[types.ModuleType, types.ModuleType]:
    import importlib

    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "part.py").write_text(part)
    (tmp_path / "caller.py").write_text(caller)
    sys.path.insert(0, str(tmp_path))
    try:
        for name in ("part", "caller"):
            sys.modules.pop(name, None)
        return importlib.import_module("part"), importlib.import_module("caller")
    finally:
        sys.path.remove(str(tmp_path))


@settings(max_examples=25, deadline=None)
@given(x=st.integers(0, 30), scale=st.integers(-3, 3))
def test_a_spliced_part_answers_as_its_call_would(tmp_path_factory: pytest.TempPathFactory, x: int, scale: int) -> None:
    """``step`` is spliced into ``top`` (factory.SPLICED): a stored parameter gets a local of its own, an
    expression argument is evaluated once, the part's locals do not touch the caller's, and the value of the
    part's return goes to the call's target — as the plain call ``_called`` does."""
    part, caller = _toy(tmp_path_factory.mktemp("splice"))
    made = build((part, caller), ("top", "plain"), python=True)
    assert "step" not in made["top"].__code__.co_names  # spliced: no call of the part is left
    assert made["top"](x, scale) == made["plain"](x, scale) == caller.plain(x, scale)


def test_the_kernels_call_no_spliced_part() -> None:
    for kernel in K.python_kernels():
        assert not set(SPLICED) & set(kernel.__code__.co_names), kernel.__name__


def test_a_part_that_cannot_be_spliced_is_refused(tmp_path: Path) -> None:
    early = _PART.replace("    out[0] = total\n", "    if total < 0:\n        return total, 0\n    out[0] = total\n")
    part, caller = _toy(tmp_path / "early", part=early)
    with pytest.raises(ValueError, match="must end in its only return"):
        build((part, caller), ("top",), python=True)
    keyword = _CALLER.replace("step(x, total, out, 2)", "step(x, total, out, scale=2)")
    part, caller = _toy(tmp_path / "keyword", caller=keyword)
    with pytest.raises(ValueError, match="pass its 4 arguments by position"):
        build((part, caller), ("top",), python=True)

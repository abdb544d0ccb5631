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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import exact.engine.kernels as K
from exact.engine import evaluate_table
from exact.engine.kernels.factory import MODULES, source_digest
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
    assert isinstance(K.python_kernels().next_match.__globals__["fires"], types.FunctionType)


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

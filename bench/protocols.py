"""The seeds' experiment protocols, run on this project with real data (issue 9).

Each protocol is a function ``(scale, corpora, workdir) -> dict`` of JSON-able figures; :mod:`bench.suite`
runs them all and :mod:`bench.report` puts them beside the seeds' published figures (:mod:`bench.seeds`).

* Baltus 2021, ch. 5 (:mod:`bench.protocols_baltus`): ``seeds_baltus_bpi`` — §5.1 (Tables 5.1/5.2): random
  SEQ queries of length 2–8 under skip-till-next on BPI 2012; approximate, verified and exact latency side by
  side.  ``seeds_baltus_words`` — §5.2 (Tables 5.3–5.6): word streams (Brown and a larger replay of it);
  build time at the thesis' settings; the four operator forms under strict contiguity and skip-till-next.
  ``seeds_build_scaling`` — build throughput and index size against N (Spark: :mod:`bench.spark`).
  ``seeds_accuracy`` — false positives against the configured fpq; recall, which must be 1.0.
* Cadonna 2013 (:mod:`bench.protocols_cadonna`): ``seeds_exact_engine`` — the exact engine: strategies,
  two-phase and prefilter on/off (§5.4), and runtime against the maximal match-window size (§4.7.4,
  Table 4.1).

What they share (scales, the three answer modes, the guarantee checks) is :mod:`bench.protocol_runs`.

Guarantees are checked while measuring: a verified answer different from the exact one, or an exact match
outside every approximate candidate interval, raises :class:`bench.timing.RecallError` once the protocol's
figures are complete (the runner writes them, then fails).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.corpora import Corpora
from bench.protocol_runs import SCALES, TINY, Scale
from bench.protocols_baltus import accuracy, baltus_bpi, baltus_words, build_scaling
from bench.protocols_cadonna import exact_engine

# Re-exported for the suite and the tests.
__all__ = ["PROTOCOLS", "SCALES", "TINY", "Scale", "run_protocol"]


PROTOCOLS: dict[str, Callable[[Scale, Corpora, Path], dict[str, Any]]] = {
    "seeds_baltus_bpi": baltus_bpi,
    "seeds_baltus_words": baltus_words,
    "seeds_build_scaling": build_scaling,
    "seeds_accuracy": accuracy,
    "seeds_exact_engine": exact_engine,
}


def run_protocol(name: str, scale: Scale, corpora: Corpora, workdir: Path | None = None) -> dict[str, Any]:
    """Run one protocol in a scratch directory (removed afterwards)."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        return PROTOCOLS[name](scale, corpora, Path(tmp))

"""The report's building blocks: numbers and tables in Markdown, the JSON records, the plots.

:func:`fmt` and :func:`table` write every figure of ``docs/BENCHMARKS.md``; :func:`load_results` reads the
records under ``bench/results/``, and :func:`missing_note` says why a section has no figures.
:class:`Plots` saves matplotlib figures under ``docs/bench/``.  The sections are :mod:`bench.report`
(the run, the guarantees, this project's own benchmarks) and :mod:`bench.report_seeds` (the seeds'
protocols, side by side with their published figures).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------------------- formatting


def fmt(value: Any, digits: int = 3) -> str:
    """A number for a table: thousands separators for integers, ``digits`` significant decimals otherwise."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        if value == 0:
            return "0"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) < 1e-3:
            return f"{value:.2e}"
        return f"{value:.{digits}g}"
    return str(value).replace("|", "\\|")


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(fmt(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def s_to_ms(value: Any) -> float | None:
    return None if value is None else float(value) * 1000.0


def load_results(results: Path) -> dict[str, dict[str, Any]]:
    """Every ``*.json`` record in ``results`` by benchmark name."""
    out = {}
    for path in sorted(results.glob("*.json")):
        try:
            out[path.stem] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            out[path.stem] = {"error": f"unreadable record {path.name}: {err}", "results": None}
    return out


def missing_note(record: dict[str, Any] | None, name: str) -> str | None:
    """The note a section prints instead of figures, or None when the record has figures."""
    if record is None:
        return f"_Not run: no `bench/results/{name}.json`._"
    if record.get("error"):
        first = str(record["error"]).splitlines()[0]
        return f"**Failed:** `{first}` (see `bench/results/{name}.json`)."
    if not record.get("results"):
        return f"_No figures in `bench/results/{name}.json`._"
    return None


def flatten(value: Any, prefix: str = "", depth: int = 3) -> list[tuple[str, Any]]:
    """Scalar leaves of nested JSON as ``(dotted.path, value)``, lists of scalars summarised."""
    if isinstance(value, dict) and depth > 0:
        out = []
        for k, v in value.items():
            out += flatten(v, f"{prefix}.{k}" if prefix else str(k), depth - 1)
        return out
    if isinstance(value, (int, float, str, bool)) or value is None:
        return [(prefix, value)]
    if isinstance(value, list):
        return [(prefix, f"[{len(value)} items]")]
    return [(prefix, "{…}")]


# ------------------------------------------------------------------------------------------- plots


class Plots:
    """PNG plots under ``docs/bench/`` (matplotlib, Agg backend); returns markdown image links."""

    def __init__(self, docs: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        self.dir = docs / "bench"
        self.dir.mkdir(parents=True, exist_ok=True)
        for old in self.dir.glob("*.png"):
            old.unlink()

    def save(self, fig: Any, name: str, caption: str) -> str:
        import matplotlib.pyplot as plt

        fig.tight_layout()
        fig.savefig(self.dir / f"{name}.png", dpi=110)
        plt.close(fig)
        return f"![{caption}](bench/{name}.png)"

    @staticmethod
    def figure(width: float = 7.0, height: float = 4.0, ncols: int = 1) -> tuple[Any, Any]:
        import matplotlib.pyplot as plt

        return plt.subplots(1, ncols, figsize=(width, height))

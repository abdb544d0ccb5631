"""``seqsketch query … --plot answer.png``: the web console's timeline as a picture (matplotlib, imported only
here and only when asked for: ``pip install 'seqsketch[plot]'``).

Three lanes over the dataset's history, start to end: events over time, the candidate intervals of the
index, and the matches (or the answer's intervals) where they lie, with what the index spared beneath.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from exact.errors import SeqsketchError

DENSITY = "#9fbddb"
CANDIDATE = "#e39b12"
MATCH = "#1f5f99"
ROWS = 6


def _time(iso: str | None) -> dt.datetime | None:
    return None if not iso else dt.datetime.fromisoformat(iso)


def _pack(spans: Sequence[tuple[float, float]], min_width: float) -> list[int]:
    """A row for each span (in start order) so that spans in one row do not overlap, at most ``ROWS`` rows."""
    ends = [float("-inf")] * ROWS
    rows = []
    for start, end in spans:
        free = [r for r in range(ROWS) if ends[r] < start]
        row = free[0] if free else min(range(ROWS), key=lambda r: ends[r])
        ends[row] = max(ends[row], end, start + min_width)
        rows.append(row)
    return rows


def pyplot() -> Any:
    """matplotlib's ``pyplot`` drawing off screen, or a clear error when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SeqsketchError("--plot needs matplotlib: pip install 'seqsketch[plot]'", where="--plot") from None
    return plt


def plot_answer(path: str | Path, *, query: str, info: Mapping[str, Any], density: Mapping[str, Any],
                answer: Mapping[str, Any], candidates: Mapping[str, Any] | None) -> Path:
    """Draw ``answer`` (docs/contract.md §3) on the timeline of dataset ``info`` and write it to ``path`` (PNG, or
    whatever matplotlib makes of the suffix)."""
    plt = pyplot()
    import matplotlib.dates as mdates

    start, end = _time(info.get("start_ts")), _time(info.get("end_ts"))
    if start is None or end is None:
        raise SeqsketchError("the dataset has no events to draw", where="--plot")
    t0, t1 = mdates.date2num(start), mdates.date2num(end)
    span = max(t1 - t0, 1e-9)
    fig, ax = plt.subplots(figsize=(13, 4.2), dpi=110)
    lane = {"density": (ROWS + 2.2, 1.6), "candidates": (ROWS + 0.6, 1.0), "matches": (0, ROWS)}

    counts = list(density.get("counts") or [])
    if counts and density.get("start_ts"):
        d0, d1 = mdates.date2num(_time(density["start_ts"])), mdates.date2num(_time(density["end_ts"]))
        width = max(d1 - d0, 1e-9) / len(counts)
        top = max(counts) or 1
        base, height = lane["density"]
        ax.bar([d0 + i * width for i in range(len(counts))], [height * c / top for c in counts], width=width,
               bottom=base, align="edge", color=DENSITY, linewidth=0)

    base, height = lane["candidates"]
    spans = [(mdates.date2num(_time(iv["start_ts"])), mdates.date2num(_time(iv["end_ts"])))
             for iv in (candidates or {}).get("intervals") or [] if iv.get("start_ts")]
    ax.broken_barh([(a, max(b - a, span / 1500)) for a, b in spans], (base + 0.1, height - 0.2),
                   facecolors=CANDIDATE, alpha=0.45, edgecolors=CANDIDATE, linewidth=0.4)

    matches = answer.get("matches") or []
    places = [(mdates.date2num(_time(m["start_ts"])), mdates.date2num(_time(m["end_ts"])))
              for m in matches if m.get("start_ts")]
    if places:
        order = sorted(range(len(places)), key=lambda i: places[i][0])
        rows = _pack([places[i] for i in order], span / 400)
        for i, row in zip(order, rows, strict=True):
            a, b = places[i]
            ax.broken_barh([(a, max(b - a, span / 900))], (row + 0.15, 0.7), facecolors=MATCH, alpha=0.85)
    elif answer.get("mode") != "approximate":
        intervals = [(mdates.date2num(_time(iv["start_ts"])), mdates.date2num(_time(iv["end_ts"])))
                     for iv in answer.get("intervals") or [] if iv.get("start_ts")]
        ax.broken_barh([(a, max(b - a, span / 900)) for a, b in intervals], (0.1, ROWS - 0.2),
                       facecolors=MATCH, alpha=0.55)

    ax.set_xlim(t0, t1 if t1 > t0 else t0 + 1e-6)
    ax.set_ylim(-0.2, ROWS + 4)
    ax.set_yticks([lane["density"][0] + 0.8, lane["candidates"][0] + 0.5, ROWS / 2],
                  ["events", "candidates", "matches"])
    ax.tick_params(axis="y", length=0)
    locator = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    ax.grid(axis="x", color="#e4e8ee")
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_xlabel("time (UTC)")
    ax.set_title(_title(query, info, answer), loc="left", fontsize=10.5)
    fig.text(0.01, 0.01, _footer(answer, candidates), fontsize=9, color="#455463")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out


def _title(query: str, info: Mapping[str, Any], answer: Mapping[str, Any]) -> str:
    if answer.get("mode") == "approximate":
        found = f"{len(answer.get('intervals') or []):,} candidate interval(s)"
    else:
        count = answer.get("count")
        drawn = len(answer.get("matches") or [])
        found = f"{count:,} match(es)" if count is not None else f"{drawn:,}+ matches"
        if answer.get("truncated"):
            found += f", {len(answer.get('matches') or []):,} drawn"
    text = " ".join(query.split())
    text = text if len(text) <= 130 else text[:127] + "…"
    return f"{info.get('name')}: {found} [{answer.get('mode')}, {answer.get('strategy', '')}]\n{text}"


def _footer(answer: Mapping[str, Any], candidates: Mapping[str, Any] | None) -> str:
    s = answer.get("stats") or {}
    total = s.get("events_total") or 0
    scanned = 0 if answer.get("mode") == "approximate" else s.get("events_scanned") or 0
    found = ((candidates or {}).get("stats") or s).get("candidate_intervals", 0)
    parts = [f"index {s.get('approximate_ms', 0)} ms", f"verify {s.get('verify_ms', 0)} ms",
             f"{s.get('nodes_probed', 0):,} filters probed", f"{found:,} candidate interval(s)"]
    if total:
        parts.append(f"{scanned:,} of {total:,} events scanned: the index spared "
                     f"{100 - 100 * scanned / total:.2f} % of the history" if answer.get("mode") != "exact"
                     else f"all {total:,} events scanned (exact mode: no index)")
    return " · ".join(parts)

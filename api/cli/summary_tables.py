"""How ``seqsketch query`` prints an answer summarised from every match (docs/contract.md §3.7): a funnel's
steps, the events that follow, the time between steps, the counts by a field — each as a table under a one-line
head."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from api.cli.output import table

#: the colour of a summary's bars (the console's accent)
BAR = "#1f5f99"

#: a duration's units, longest first: (name, milliseconds)
_UNITS = (("d", 86_400_000.0), ("h", 3_600_000.0), ("min", 60_000.0), ("s", 1000.0))


def human_ms(ms: float | None) -> str:
    """A duration for people: ``-`` for none, ``850 ms``, ``12.5 s``, ``3.2 h``, ``8.9 d``."""
    if ms is None:
        return "-"
    for name, size in _UNITS:
        if abs(ms) >= size:
            return f"{ms / size:.1f} {name}"
    return f"{ms:.0f} ms" if ms == int(ms) else f"{ms:.3g} ms"


def summary_text(result: dict[str, Any]) -> str | None:
    """The printed answer of a summary (None: the answer is not one)."""
    stats = result.get("stats", {})
    rows: list[tuple[str, ...]]
    tail = f"[{result.get('mode')}, {result.get('strategy', '')}, {stats.get('total_ms', 0):.1f} ms]"
    if "funnel" in result:
        units = result.get("units", "partitions")
        head = f"{result.get('unit_count', 0):,} {units} reached step 1 or further; {result['count']:,} " \
               f"match(es) of every step  {tail}"
        first = max(1, result["funnel"][0]["reached"]) if result["funnel"] else 1
        rows = [(str(s["step"]), s["label"], f"{s['reached']:,}", f"{100.0 * s['reached'] / first:.1f}%",
                 f"{s['stopped']:,}", human_ms(s["median_ms"]), human_ms(s["p90_ms"])) for s in result["funnel"]]
        return f"{head}\n{table(('STEP', 'VAR', 'REACHED', 'OF STEP 1', 'STOPPED', 'MEDIAN', 'P90'), rows)}"
    if "next" in result:
        head = f"{result['count']:,} match(es); the events after each  {tail}"
        rows = [(str(r["offset"]), "(end)" if r["type"] is None else r["type"], f"{r['count']:,}",
                 human_ms(r["median_ms"]), human_ms(r["p90_ms"])) for r in result["next"]]
        return f"{head}\n{table(('OFFSET', 'TYPE', 'MATCHES', 'MEDIAN AFTER', 'P90 AFTER'), rows)}" if rows else head
    if "durations" in result:
        head = f"{result['count']:,} match(es); the time between their steps  {tail}"
        rows = [(d["from"] + " -> " + d["to"] + (" (whole)" if d.get("whole") else ""), f"{d['count']:,}",
                 human_ms(d["min_ms"]), human_ms(d["p50_ms"]), human_ms(d["p90_ms"]), human_ms(d["p99_ms"]),
                 human_ms(d["max_ms"])) for d in result["durations"]]
        return f"{head}\n{table(('STEPS', 'MATCHES', 'MIN', 'P50', 'P90', 'P99', 'MAX'), rows)}"
    if "groups" in result:
        what = "case(s)" if "case_count" in result else "match(es)"
        head = f"{result['count']:,} match(es)" + (f" in {result['case_count']:,} case(s)" if "case_count" in result
                                                   else "") + f", {result['group_count']:,} value(s)  {tail}"
        rows = [("-" if g["value"] is None else str(g["value"]), f"{g['count']:,}") for g in result["groups"]]
        other = result.get("other") or {}
        if other.get("groups"):
            rows.append((f"(other {other['groups']:,})", f"{other['count']:,}"))
        return f"{head}\n{table(('VALUE', what.upper()), rows)}" if rows else head
    return None


def plot_summary(path: str | Path, *, query: str, answer: dict[str, Any]) -> Path:
    """``query … --plot`` of a summary: the funnel's bars, the next events' bars (offset 1), one histogram per
    pair of steps, or the counts by a field — written to ``path`` (PNG, or what matplotlib makes of it)."""
    from api.cli.plot import pyplot

    plt = pyplot()
    if "durations" in answer:
        entries = answer["durations"]
        fig, axes = plt.subplots(len(entries), 1, figsize=(11, 2.2 * len(entries) + 0.6), dpi=110, squeeze=False)
        for ax, d in zip(axes[:, 0], entries, strict=True):
            buckets = d["histogram"]
            unit, size = next(((n, z) for n, z in _UNITS if (d["max_ms"] or 0) >= z), ("ms", 1.0))
            ax.bar([b["lo_ms"] / size for b in buckets], [b["count"] for b in buckets],
                   width=[max(b["hi_ms"] - b["lo_ms"], 1e-9) / size for b in buckets], align="edge", color=BAR)
            ax.set_title(f"{d['from']} -> {d['to']}{' (first to last)' if d.get('whole') else ''}: "
                         f"p50 {human_ms(d['p50_ms'])}, p90 {human_ms(d['p90_ms'])}", loc="left", fontsize=10)
            ax.set_xlabel(unit)
    else:
        if "funnel" in answer:
            labels = [f"{s['step']}. {s['label']}" for s in answer["funnel"]]
            values = [s["reached"] for s in answer["funnel"]]
            title = f"funnel: {answer.get('unit_count', 0):,} {answer.get('units', '')} reached step 1"
        elif "next" in answer:
            rows = [r for r in answer["next"] if r["offset"] == 1][:15]
            labels = ["(ended)" if r["type"] is None else r["type"] for r in rows]
            values = [r["count"] for r in rows]
            title = "what comes next"
        else:
            labels = ["-" if g["value"] is None else str(g["value"]) for g in answer.get("groups", [])]
            values = [g["count"] for g in answer.get("groups", [])]
            if (answer.get("other") or {}).get("groups"):
                labels.append(f"(other {answer['other']['groups']:,})")
                values.append(answer["other"]["count"])
            title = "by value"
        fig, ax = plt.subplots(figsize=(11, 0.45 * len(labels) + 1.2), dpi=110)
        ax.barh(range(len(values)), values, color=BAR)
        ax.set_yticks(range(len(values)), labels)
        ax.invert_yaxis()
        for i, v in enumerate(values):
            ax.text(v, i, f" {v:,}", va="center", fontsize=9)
        ax.set_title(title, loc="left", fontsize=10.5)
    fig.suptitle(query if len(query) < 110 else query[:107] + "...", x=0.01, ha="left", fontsize=9,
                 color="#455463")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out

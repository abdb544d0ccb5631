"""Smoke test of ``python -m bench all``: the seed protocols at a tiny scale on real data, then the report.

Timing figures are never asserted (speed is measured in bench/, not in tests); what is checked is that every
protocol runs to completion with its guarantee checks, writes its JSON record, and that the generated report
has every section, its plots, the seeds' figures and the header saying it is generated.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import seeds
from bench.protocol_runs import outside_intervals
from bench.protocols import PROTOCOLS, TINY
from bench.protocols_cadonna import duplicate_types, max_window
from bench.report import SECTIONS, fmt, generate
from bench.suite import run_all
from bench.timing import RecallError


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> tuple[Path, Path, list[str]]:
    root = tmp_path_factory.mktemp("bench")
    report, errors = run_all(TINY, results=root / "results", docs=root / "docs", data=shared_data,
                             registered=False, command="python -m bench all --quick (tiny test scale)")
    return root, report, errors


def test_every_protocol_runs_and_records_figures(tiny_run: tuple[Path, Path, list[str]]) -> None:
    root, _, errors = tiny_run
    assert errors == []
    for name in PROTOCOLS:
        record = json.loads((root / "results" / f"{name}.json").read_text())
        assert record["benchmark"] == name and record["scale"]["name"] == "tiny"
        assert "error" not in record and record["results"]
        assert record["machine"]["cores"] and record["machine"]["python"]


def test_report_has_every_section_in_order(tiny_run: tuple[Path, Path, list[str]]) -> None:
    _, report, _ = tiny_run
    text = report.read_text()
    assert "Do not edit by hand" in text
    assert "`python -m bench all --quick (tiny test scale)`" in text
    positions = [text.index(f"## {title}\n") for title in SECTIONS]
    assert positions == sorted(positions)
    # Only the registry's Spark, query and peers benchmarks are absent: the smoke test runs the protocols.
    assert text.count("Not run:") == 3 and "(`python -m bench spark`): _Not run: no" in text
    assert "_Not run: no `bench/results/peers.json`._" in text
    assert "(`python -m bench query`): _Not run: no" in text
    for note in ("Failed:", "No figures"):
        assert note not in text


def test_report_puts_the_seeds_figures_beside_ours(tiny_run: tuple[Path, Path, list[str]]) -> None:
    _, report, _ = tiny_run
    text = report.read_text()
    # Baltus Table 5.2, length 2: Approach 1 0.0705 s and Mavroudopoulos 0.07654 s, shown in ms.
    assert fmt(0.0705 * 1000) in text and fmt(0.07654 * 1000) in text
    for _, events, distinct in seeds.BALTUS_T53.rows:
        assert fmt(events) in text and fmt(distinct) in text
    for row in seeds.CADONNA_T41.rows:
        assert fmt(row[2]) in text
    for hw in (seeds.BALTUS_HW, seeds.CADONNA_HW):
        assert hw.cpu in text


def test_report_images_exist_and_are_png(tiny_run: tuple[Path, Path, list[str]]) -> None:
    root, report, _ = tiny_run
    links = re.findall(r"!\[[^\]]*\]\((bench/[^)]+\.png)\)", report.read_text())
    assert len(links) == 5
    for link in links:
        assert (root / "docs" / link).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_failed_or_missing_benchmarks_keep_their_section(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "seeds_accuracy.json").write_text(json.dumps(
        {"benchmark": "seeds_accuracy", "error": "RecallError: 3 exact matches missed", "results": None}))
    report = generate(results, tmp_path / "docs", command="x", host={}, generated_at="then", errors=["boom"])
    text = report.read_text()
    assert all(f"## {title}\n" in text for title in SECTIONS)
    assert "**Failed:** `RecallError: 3 exact matches missed`" in text
    # four protocols, the Spark comparison, the query benchmark and the peers
    assert text.count("_Not run: no `bench/results/") == 7
    assert "This run had failures" in text


def test_query_benchmark_answers_every_mode_alike_and_reports_it(shared_data: Path) -> None:
    """The query benchmark on a BPI 2012 prefix: verified and the pruned scan answer as exact does, every
    figure the report shows is recorded, and the report's section shows them."""
    from bench.corpora import Corpora
    from bench.query import measure
    from bench.report import section_query

    stream = Corpora(data=shared_data).bpic_events(30_000)
    out = measure("bpic2012", stream, per_length=1, forms=1, seed=7, lengths=range(2, 4))
    s = out["summary"]
    assert s["verified_equals_exact"] and s["pruned_scan_equals_exact"]
    rows = out["queries"]
    assert all(r["verified_equals_exact"] and r["pruned_scan_equals_exact"] for r in rows)
    assert all(r["pruned_scan_ms"] > 0 and r["events_scanned"] <= r["events_total"] == 30_000 for r in rows)
    text = section_query({"benchmark": "query", "ran_at": "then", "results": {"bpic2012": out}})
    assert "**bpic2012** — 30,000 events" in text and "pruned scan = exact: yes" in text
    assert f"{s['queries']} queries" in text


def test_inside_counts_matches_outside_every_interval() -> None:
    intervals = [{"start_seq": 0, "end_seq": 9}, {"start_seq": 20, "end_seq": 29}]
    matches = [{"start_seq": s, "end_seq": e} for s, e in ((0, 9), (5, 12), (15, 16), (20, 21), (28, 30))]
    brute = sum(not any(iv["start_seq"] <= m["start_seq"] and m["end_seq"] <= iv["end_seq"]
                        for iv in intervals) for m in matches)
    assert outside_intervals(matches, intervals) == brute == 3
    assert outside_intervals(matches, []) == 5


def test_recall_error_is_an_assertion() -> None:
    assert issubclass(RecallError, AssertionError)


def test_duplicated_types_follow_cadonna_and_grow_the_window(shared_data: Path) -> None:
    from bench.corpora import Corpora

    stream = Corpora(shared_data, bpic_limit=3_000).bpic()
    kinds = frozenset({"A_SUBMITTED", "A_PARTLYSUBMITTED"})
    derived = duplicate_types(stream, kinds, 2)
    assert derived.num_rows == stream.num_rows
    assert derived.column("seq").to_pylist() == list(range(stream.num_rows))
    types, original = derived.column("type").to_pylist(), stream.column("type").to_pylist()
    expected: list[str] = []
    for t in original:  # the definition: each event of the kinds three times in place, then trim
        expected += [t] * (3 if t in kinds else 1)
    assert types == expected[:stream.num_rows]
    day = 86_400 * 1_000_000
    assert max_window(derived, day) >= max_window(stream, day)


def _cells(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line)) - 1


def test_report_tables_are_well_formed(tiny_run: tuple[Path, Path, list[str]]) -> None:
    _, report, _ = tiny_run
    tables, current = [], []
    for line in report.read_text().splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    assert len(tables) >= 10
    for rows in tables:
        assert re.fullmatch(r"\|(---\|)+", rows[1])
        assert {_cells(r) for r in rows} == {_cells(rows[0])}, rows[0]


def test_peers_benchmark_asks_duckdb_the_same_questions_and_reports_it(shared_data: Path) -> None:
    """The DuckDB (and, where chdb is installed, ClickHouse) comparison on a BPI 2012 prefix: each question's
    SQL answers what seqsketch's exact and verified modes answer (``measure`` raises otherwise), and the
    report's section shows every row."""
    pytest.importorskip("duckdb")
    from bench.corpora import Corpora
    from bench.peers import FREQUENT, QUESTIONS, measure, summary
    from bench.report import section_peers

    stream = Corpora(data=shared_data).bpic_events(40_000)
    rows = measure("bpi", stream, rounds=1)
    assert [r["question"] for r in rows] == [q.name for q in QUESTIONS]
    assert all(r["equal"] and r["events"] == 40_000 for r in rows)
    assert any(r["answer"] > 0 for r in rows) and any(r["answer"] == 0 for r in rows)
    try:
        import chdb  # noqa: F401  (the peers extra)
    except ImportError:
        assert all(r["clickhouse_ms"] is None for r in rows)
    else:  # ClickHouse was asked every question, and answered as the others did
        assert all(r["clickhouse_ms"] is not None and "ASOF JOIN" in r["clickhouse_sql"] for r in rows)
    results = summary(1, rows)
    frequent = [r for r in rows if r["question"] in FREQUENT]
    assert len(frequent) == len(FREQUENT)
    assert results["frequent_per_case"] == {"bpi": {
        "exact_worst_ratio": max(r["exact_over_duckdb"] for r in frequent),
        "verified_worst_ratio": max(r["verified_over_duckdb"] for r in frequent)}}
    text = section_peers({"benchmark": "peers", "ran_at": "then", "results": results})
    assert text.count("| bpi (40,000) |") == len(QUESTIONS)
    assert "frequent per-case questions" in text and "bpi exact" in text

"""seqsketch beside the SQL engines a user would pick instead: DuckDB, in memory and warm, and ClickHouse in
process (``chdb``, a MergeTree table), on the same events.

``python -m bench peers [--quick]``.  Datasets: BPI Challenge 2012 (262,200 events) and replays of it with
shifted time and case ids — 5 copies (1,311,000 events) and 38 copies (9,963,600 events; one replay of 4
copies with ``--quick``) — each built as a real dataset (local builder, default sizing) and loaded into a
DuckDB table (``seq``, ``ts`` in µs, ``type``, ``case``) once, before any timing.

The questions are skip-till-next-match chains, which SQL answers exactly with ASOF joins — per first event,
the first event of the next type after it (in its case, when partitioned) — and the window as a filter on
the last event's ``ts`` (ClickHouse's ASOF join wants an equality: an unpartitioned chain joins on a
constant): a rare unpartitioned SEQ, a rare partitioned SEQ, a 3-element ``RETURN exists``
(no match), two frequent partitioned ``RETURN count`` within 30 days, a 4-element partitioned SEQ, an
impossible order and an absent type.  The *frequent per-case* questions (the two counts and the 4-element
SEQ) are the common shape of process mining; each dataset's worst ratio over them is recorded apart.

For each question the answers are checked equal first (the matches with their bindings, the count, or the
yes/no) with both engines; then seqsketch's ``exact`` mode (the engine over the whole stream, read from the
store) and ``verified`` mode (the index, then the engine on the candidates), DuckDB's query and
ClickHouse's run interleaved, each several times, and the medians and their ratios are recorded, with the
events each seqsketch mode read.  Without ``chdb`` installed (``pip install -e '.[peers]'``) the ClickHouse
columns are left empty.
Each seqsketch mode also runs on one thread (``SEQSKETCH_QUERY_THREADS=1``) beside the default (the
machine's cores), and the speed-up is recorded.
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from api.service import run_query
from bench.timing import threads_set, timed
from sketch.build import BuildOptions
from sketch.dataset import Dataset

DAY = 86_400_000_000
HOUR = 3_600_000_000


@dataclass(frozen=True)
class Question:
    """A chain of types, as text for seqsketch and as ASOF joins for DuckDB."""

    name: str
    types: tuple[str, ...]
    partitioned: bool
    within: int | None  # µs
    returns: str  # matches | count | exists

    def text(self) -> str:
        names = [f"v{i}" for i in range(len(self.types))]
        pattern = ", ".join(f"'{t}' {n}" for t, n in zip(self.types, names, strict=True))
        out = f"PATTERN SEQ({pattern})"
        if self.partitioned:
            out += " PARTITION BY case"
        if self.within is not None:
            out += f" WITHIN {self.within // 1000} ms"
        return out + f" RETURN {self.returns}"

    def sql(self, clickhouse: bool = False) -> str:
        """The question as DuckDB SQL, or (``clickhouse``) as ClickHouse's, whose ASOF join needs an equality:
        the case, or a constant."""
        k = len(self.types)
        case = "cid" if clickhouse else '"case"'
        if clickhouse and not self.partitioned:
            case = "0"
        ctes = ",\n".join(f"e{i} AS (SELECT seq AS s{i}, ts AS t{i}, {case} AS c{i} FROM ev "
                          f"WHERE type = '{t}')" for i, t in enumerate(self.types))
        keyed = self.partitioned or clickhouse
        joins = "".join(
            f" ASOF JOIN e{i} ON {'c0 = c' + str(i) + ' AND ' if keyed else ''}s{i - 1} < s{i}"
            for i in range(1, k))
        where = f" WHERE t{k - 1} - t0 <= {self.within}" if self.within is not None else ""
        chain = f"WITH {ctes}\nSELECT {', '.join(f's{i}' for i in range(k))} FROM e0{joins}{where}"
        if self.returns == "count":
            return f"SELECT count(*) FROM ({chain})"
        if self.returns == "exists":
            return f"SELECT count(*) > 0 FROM (SELECT 1 FROM ({chain}) LIMIT 1)"
        return chain + " ORDER BY s0"


QUESTIONS = (
    Question("rare unpartitioned SEQ", ("W_Wijzigen contractgegevens", "O_DECLINED"), False, 2 * DAY,
             "matches"),
    Question("rare partitioned SEQ", ("W_Beoordelen fraude", "A_DECLINED"), True, HOUR, "matches"),
    Question("3-element exists (none)", ("A_ACTIVATED", "O_SENT", "A_DECLINED"), True, None, "exists"),
    Question("frequent partitioned count", ("O_SENT", "O_CANCELLED"), True, 30 * DAY, "count"),
    Question("frequent W count", ("W_Completeren aanvraag", "W_Nabellen offertes"), True, 30 * DAY, "count"),
    Question("4-element partitioned SEQ", ("A_SUBMITTED", "A_PREACCEPTED", "O_SENT", "O_DECLINED"), True,
             30 * DAY, "matches"),
    Question("impossible order", ("A_APPROVED", "A_SUBMITTED"), True, None, "matches"),
    Question("absent type", ("A_SUBMITTED", "A_NO_SUCH_TYPE"), True, None, "matches"),
)


#: the frequent per-case questions, whose ratios the summary gives per dataset
FREQUENT = ("frequent partitioned count", "frequent W count", "4-element partitioned SEQ")


def duckdb_table(stream: pa.Table) -> pa.Table:
    """The stream as DuckDB's table: seq, ts (µs), type, case."""
    return pa.table({"seq": stream.column("seq"), "ts": stream.column("ts").cast(pa.int64()),
                     "type": stream.column("type").cast(pa.string()),
                     "case": pc.struct_field(stream.column("attrs"), "case")})


def clickhouse_session(stream: pa.Table, folder: Path) -> Any:
    """A chdb session holding the stream as a MergeTree table ``ev`` (seq, ts in µs, type, cid), or None
    without chdb."""
    try:
        import chdb.session
    except ImportError:
        return None
    import pyarrow.parquet as pq

    table = pa.table({"seq": stream.column("seq").cast(pa.int64()), "ts": stream.column("ts").cast(pa.int64()),
                      "type": stream.column("type").cast(pa.string()),
                      "cid": pc.struct_field(stream.column("attrs"), "case").cast(pa.string())})
    folder.mkdir()
    session = chdb.session.Session(str(folder / "chdb"))
    session.query("CREATE TABLE ev (seq Int64, ts Int64, type String, cid String) ENGINE = MergeTree ORDER BY seq")
    parquet = folder / "ev.parquet"
    pq.write_table(table, parquet)
    session.query(f"INSERT INTO ev SELECT seq, ts, type, cid FROM file('{parquet}', Parquet)")
    session.query("OPTIMIZE TABLE ev FINAL")  # (its parts merged now, not in the background while others run)
    parquet.unlink()
    return session


def clickhouse_rows(session: Any, sql: str) -> list[tuple]:
    """ClickHouse's answer as rows of integers."""
    text = str(session.query(sql, "TSV")).strip()
    return [tuple(int(v) for v in line.split("\t")) for line in text.splitlines()] if text else []


def same_answer(q: Question, ours: dict[str, Any], theirs: list[tuple]) -> bool:
    if q.returns == "count":
        return ours["count"] == theirs[0][0]
    if q.returns == "exists":
        return ours["exists"] == bool(theirs[0][0])
    names = [f"v{i}" for i in range(len(q.types))]
    got = [tuple(m["bindings"][n][0] for n in names) for m in ours["matches"]]
    return got == [tuple(row) for row in theirs]


def measure(label: str, stream: pa.Table, rounds: int) -> list[dict[str, Any]]:
    import duckdb

    from exact.engine.parallel import query_threads

    cores = query_threads()

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="seqsketch-peers-") as tmp:
        home = Path(tmp)
        Dataset.build(home, label, stream, BuildOptions())
        con = duckdb.connect()
        con.register("stream", duckdb_table(stream))
        con.execute("CREATE TABLE ev AS SELECT * FROM stream")
        con.unregister("stream")
        clickhouse = clickhouse_session(stream, Path(tmp) / "clickhouse")
        for q in QUESTIONS:
            text, sql, ch_sql = q.text(), q.sql(), q.sql(clickhouse=True)
            theirs = con.execute(sql).fetchall()
            exact = run_query(home, label, text, mode="exact")
            verified = run_query(home, label, text, mode="verified")
            equal = same_answer(q, exact, theirs) and same_answer(q, verified, theirs)
            if clickhouse is not None:
                equal = equal and same_answer(q, exact, clickhouse_rows(clickhouse, ch_sql))
            if not equal:
                raise AssertionError(f"{label}: seqsketch, DuckDB and ClickHouse disagree on {q.name}: {text}")
            times: dict[str, list[float]] = {"exact": [], "verified": [], "exact_1t": [], "verified_1t": [],
                                             "duckdb": [], "clickhouse": []}
            for k in range(rounds):  # interleaved, so the machine's moods fall on all alike
                settings = (("", cores), ("_1t", 1))
                for mode in ("exact", "verified") if k % 2 else ("verified", "exact"):  # (nor either mode)
                    for suffix, threads in settings if k % 2 else settings[::-1]:  # neither always first
                        with threads_set(threads):
                            seconds = timed(lambda m=mode, t=text: run_query(home, label, t, mode=m))[1]
                        times[mode + suffix].append(1000 * seconds)
                times["duckdb"].append(1000 * timed(lambda s=sql: con.execute(s).fetchall())[1])
                if clickhouse is not None:
                    times["clickhouse"].append(1000 * timed(lambda s=ch_sql: clickhouse_rows(clickhouse, s))[1])
            med = {k: statistics.median(v) for k, v in times.items() if v}
            ch = med.get("clickhouse")
            fastest = min(med["duckdb"], ch) if ch is not None else med["duckdb"]
            answer_size = (exact["count"] if q.returns != "exists" else int(exact["exists"]))
            rows.append({
                "dataset": label, "events": stream.num_rows, "question": q.name, "query": text, "sql": sql,
                "answer": answer_size, "equal": equal,
                "exact_ms": round(med["exact"], 2), "verified_ms": round(med["verified"], 2),
                "duckdb_ms": round(med["duckdb"], 2),
                "exact_over_duckdb": round(med["exact"] / med["duckdb"], 3),
                "verified_over_duckdb": round(med["verified"] / med["duckdb"], 3),
                "clickhouse_ms": None if ch is None else round(ch, 2), "clickhouse_sql": ch_sql,
                "verified_over_clickhouse": None if ch is None else round(med["verified"] / ch, 3),
                "verified_over_fastest_peer": round(med["verified"] / fastest, 3),
                "verified_over_exact": round(med["verified"] / med["exact"], 3),
                "threads": cores, "exact_1t_ms": round(med["exact_1t"], 2),
                "verified_1t_ms": round(med["verified_1t"], 2),
                "exact_threads_speedup": round(med["exact_1t"] / med["exact"], 3),
                "verified_threads_speedup": round(med["verified_1t"] / med["verified"], 3),
                "exact_scanned": exact["stats"]["events_scanned"],
                "verified_scanned": verified["stats"]["events_scanned"]})
            print(f"{label:>8} {q.name:<30} exact {med['exact']:9.2f} ms  verified {med['verified']:9.2f} ms"
                  f"  duckdb {med['duckdb']:9.2f} ms  clickhouse {ch or float('nan'):9.2f} ms"
                  f"  1->{cores} threads x{med['exact_1t'] / med['exact']:.2f}"
                  f" x{med['verified_1t'] / med['verified']:.2f}", flush=True)
        con.close()
        if clickhouse is not None:
            clickhouse.close()
    return rows


def run(quick: bool = False) -> dict[str, Any]:
    from bench.corpora import Corpora, replay_log

    corpora = Corpora()
    rounds = 3 if quick else 7
    bpi = corpora.bpic()
    replays = (("replay", 4),) if quick else (("replay-1m", 5), ("replay-10m", 38))
    rows = measure("bpi2012", bpi, rounds)
    for label, copies in replays:
        rows += measure(label, replay_log(corpora.bpic_raw(), copies * bpi.num_rows), rounds)
    return summary(rounds, rows)


def summary(rounds: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The record: every row, the worst ratios, and per dataset the worst over the frequent per-case
    questions."""
    frequent = {}
    for label in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == label and r["question"] in FREQUENT]
        if mine:
            frequent[label] = {"exact_worst_ratio": max(r["exact_over_duckdb"] for r in mine),
                               "verified_worst_ratio": max(r["verified_over_duckdb"] for r in mine)}
    return {"rounds": rounds, "rows": rows,
            "exact_worst_ratio": max(r["exact_over_duckdb"] for r in rows),
            "verified_worst_ratio": max(r["verified_over_duckdb"] for r in rows),
            "verified_worst_over_fastest_peer": max(r["verified_over_fastest_peer"] for r in rows),
            "verified_worst_over_exact": max(r["verified_over_exact"] for r in rows),
            "frequent_per_case": frequent}

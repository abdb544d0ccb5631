"""The answers analysts ask next, beside the engines they would ask instead: ``python -m bench analytics``.

Four questions on BPI Challenge 2012 (262,200 events) and on a replay of it at 10M events (38 copies,
shifted time and case ids), each asked of seqsketch (a built dataset, the verified mode, in process) and of
the peers that have it, in one run:

* **funnel** — ``SEQ(A_SUBMITTED, O_SENT, O_ACCEPTED, A_APPROVED) PARTITION BY case WITHIN 30 days
  RETURN funnel`` against ClickHouse's ``windowFunnel`` (``chdb``, a MergeTree table ordered by case and seq)
  and DuckDB SQL (each step's earliest event after the last, per case);
* **next** — ``SEQ(O_SENT_BACK b) PARTITION BY case RETURN next 1`` against DuckDB's ``LEAD``, ClickHouse's
  sorted arrays per case, and pm4py's directly-follows graph;
* **durations** — ``SEQ(O_SENT a, O_SENT_BACK b) PARTITION BY case RETURN durations`` (each O_SENT with the
  next O_SENT_BACK of its case, skip-till-next-match) against DuckDB's ASOF join with the nearest-rank
  quantiles written out;
* **count BY** — the same pairs ``RETURN count BY a.org:resource TOP 10`` against the ASOF join grouped.

Every answer is checked equal to each peer's before anything is timed; where the semantics differ the record
says so.  Also our own ``RETURN count`` of the same pattern, the yardstick the issue names (each answer ≤ 2×).
Times are medians of several rounds, in milliseconds.  ClickHouse comes from the ``peers`` extra
(``pip install -e '.[peers]'``; ``./dev setup`` leaves it out: it is half a gigabyte).
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from api.service import run_query
from bench.timing import median_ms
from sketch.build import BuildOptions
from sketch.dataset import Dataset

DAY_US = 86_400_000_000
FUNNEL_STEPS = ("A_SUBMITTED", "O_SENT", "O_ACCEPTED", "A_APPROVED")
FUNNEL = ("PATTERN SEQ(A_SUBMITTED s1, O_SENT s2, O_ACCEPTED s3, A_APPROVED s4) PARTITION BY case "
          "WITHIN 30 days RETURN funnel")
NEXT = "PATTERN SEQ(O_SENT_BACK b) PARTITION BY case RETURN next 1"
PAIRS = "PATTERN SEQ(O_SENT a, O_SENT_BACK b) PARTITION BY case"
DURATIONS = PAIRS + " RETURN durations"
GROUPS = PAIRS + " RETURN count BY a.org:resource TOP 10"


def peer_table(stream: pa.Table) -> pa.Table:
    attrs = stream.column("attrs")
    return pa.table({"seq": stream.column("seq"), "ts": stream.column("ts").cast(pa.int64()),
                     "type": stream.column("type").cast(pa.string()),
                     "cid": pc.struct_field(attrs, "case").cast(pa.string()),
                     "resource": pc.struct_field(attrs, "org:resource").cast(pa.string())})


# ------------------------------------------------------------------------------------------- the peers


def duckdb_funnel(con: Any) -> list[int]:
    """Per case, each step's earliest event after the previous step's, within 30 days of the first step's
    event: the furthest step reached from the case's best first event (the windows of §7.1)."""
    steps = " ".join(f"""
        , s{j} AS (SELECT s{j - 1}.cid, s{j - 1}.start, s{j - 1}.t0, min(e.seq) AS seq
            FROM s{j - 1} JOIN ev e ON e.cid = s{j - 1}.cid AND e.type = '{t}' AND e.seq > s{j - 1}.seq
                AND e.ts - s{j - 1}.t0 <= {30 * DAY_US}
            GROUP BY ALL)""" for j, t in enumerate(FUNNEL_STEPS[1:], start=2))
    sql = f"""WITH s1 AS (SELECT cid, seq AS start, ts AS t0, seq FROM ev WHERE type = '{FUNNEL_STEPS[0]}')
        {steps}
        SELECT {", ".join(f"(SELECT count(DISTINCT cid) FROM s{j})" for j in range(1, len(FUNNEL_STEPS) + 1))}"""
    return list(con.execute(sql).fetchone())


def chdb_funnel(session: Any) -> list[int]:
    sql = f"""SELECT level, count() FROM (SELECT cid, windowFunnel({30 * DAY_US})(ts,
        {", ".join(f"type = '{t}'" for t in FUNNEL_STEPS)}) AS level FROM ev GROUP BY cid)
        WHERE level > 0 GROUP BY level ORDER BY level"""
    levels = {int(a): int(b) for a, b in (line.split(",") for line in str(session.query(sql, "CSV")).split())}
    return [sum(c for lvl, c in levels.items() if lvl >= j) for j in range(1, len(FUNNEL_STEPS) + 1)]


def duckdb_next(con: Any) -> dict[str | None, int]:
    sql = """SELECT nxt, count(*) FROM (SELECT type, lead(type) OVER (PARTITION BY cid ORDER BY seq) AS nxt
        FROM ev) WHERE type = 'O_SENT_BACK' GROUP BY nxt"""
    return {a: int(b) for a, b in con.execute(sql).fetchall()}


def chdb_next(session: Any) -> dict[str | None, int]:
    sql = """SELECT nxt, count() FROM (SELECT type, leadInFrame(type, 1, '') OVER (PARTITION BY cid ORDER BY seq
        ROWS BETWEEN CURRENT ROW AND 1 FOLLOWING) AS nxt FROM ev) WHERE type = 'O_SENT_BACK' GROUP BY nxt"""
    out: dict[str | None, int] = {}
    for line in str(session.query(sql, "TSV")).splitlines():
        name, count = line.rsplit("\t", 1)
        out[name or None] = int(count)
    return out


def pm4py_next(stream: pa.Table) -> dict[str | None, int]:
    import pm4py

    frame = peer_table(stream).to_pandas()
    frame["time"] = frame["ts"].astype("datetime64[us]")
    dfg, _, ends = pm4py.discover_dfg(frame, case_id_key="cid", activity_key="type", timestamp_key="time")
    out: dict[str | None, int] = {b: int(c) for (a, b), c in dfg.items() if a == "O_SENT_BACK"}
    if ends.get("O_SENT_BACK"):
        out[None] = int(ends["O_SENT_BACK"])
    return out


_PAIRS_SQL = """SELECT a.seq AS a_seq, a.ts AS a_ts, a.resource AS resource, b.ts AS b_ts
    FROM (SELECT * FROM ev WHERE type = 'O_SENT') a
    ASOF JOIN (SELECT * FROM ev WHERE type = 'O_SENT_BACK') b ON a.cid = b.cid AND b.seq > a.seq"""


def duckdb_durations(con: Any) -> tuple[int, float, float, float, float]:
    sql = f"""SELECT count(*), min(g), list_sort(list(g))[CAST(ceil(0.5 * count(*)) AS BIGINT)],
        list_sort(list(g))[CAST(ceil(0.9 * count(*)) AS BIGINT)], max(g)
        FROM (SELECT (b_ts - a_ts) / 1000.0 AS g FROM ({_PAIRS_SQL}))"""
    n, lo, p50, p90, hi = con.execute(sql).fetchone()
    return int(n), float(lo), float(p50), float(p90), float(hi)


def duckdb_groups(con: Any) -> list[tuple[str, int]]:
    sql = f"""SELECT resource, count(*) AS n, min(a_seq) AS first FROM ({_PAIRS_SQL}) GROUP BY resource
        ORDER BY n DESC, first LIMIT 10"""
    return [(r, int(n)) for r, n, _ in con.execute(sql).fetchall()]


# -------------------------------------------------------------------------------------------- the run


def measure(label: str, stream: pa.Table, rounds: int) -> list[dict[str, Any]]:
    import chdb.session  # pip install -e '.[peers]'
    import duckdb

    rows: list[dict[str, Any]] = []
    table = peer_table(stream)
    con = duckdb.connect()
    con.register("t", table)
    con.execute("CREATE TABLE ev AS SELECT * FROM t ORDER BY cid, seq")
    con.unregister("t")
    with tempfile.TemporaryDirectory(prefix="seqsketch-analytics-") as tmp:
        session = chdb.session.Session(str(Path(tmp) / "chdb"))
        session.query("CREATE TABLE ev (seq UInt64, ts UInt64, type String, cid String, resource String) "
                      "ENGINE = MergeTree ORDER BY (cid, seq)")
        parquet = Path(tmp) / "ev.parquet"
        import pyarrow.parquet as pq

        pq.write_table(table, parquet)
        session.query(f"INSERT INTO ev SELECT seq, ts, type, cid, ifNull(resource, '') FROM file('{parquet}', "
                      "Parquet)")
        home = Path(tmp) / "home"
        home.mkdir()
        Dataset.build(home, label, stream, BuildOptions())

        def ours(text: str) -> dict[str, Any]:
            return run_query(home, label, text, mode="verified")

        def row(question: str, text: str, answer: dict[str, Any], peers: dict[str, Any], equal: dict[str, bool],
                count_text: str, notes: str = "") -> None:
            mine = median_ms(lambda: ours(text), rounds)
            counted = median_ms(lambda: ours(count_text), rounds)
            times = {name: median_ms(fn, rounds) for name, fn in peers.items()}
            fastest = min(times.values())
            rows.append({"dataset": label, "events": stream.num_rows, "question": question, "query": text,
                         "equal": equal, "ours_ms": mine, "count_ms": counted,
                         "over_count": round(mine / counted, 3), **{f"{k}_ms": v for k, v in times.items()},
                         "over_fastest_peer": round(mine / fastest, 3), "notes": notes})
            print(f"{label:>10} {question:<10} ours {mine:9.2f} ms  count {counted:8.2f} ms  "
                  + "  ".join(f"{k} {v:9.2f} ms" for k, v in times.items())
                  + f"  equal {equal}", flush=True)

        # funnel
        got = ours(FUNNEL)
        reached = [s["reached"] for s in got["funnel"]]
        theirs_f = chdb_funnel(session)
        row("funnel", FUNNEL, got, {"chdb": lambda: chdb_funnel(session), "duckdb": lambda: duckdb_funnel(con)},
            {"chdb": theirs_f == reached, "duckdb": duckdb_funnel(con) == reached},
            FUNNEL.replace("RETURN funnel", "RETURN count"),
            "" if theirs_f == reached else
            f"the semantics differ: windowFunnel orders a user's events by time alone and takes events of equal "
            f"times in either order (reached {theirs_f}); seqsketch follows the log's order ({reached}), as "
            f"DuckDB's query over seq does")
        # next
        got = ours(NEXT)
        following = {r["type"]: r["count"] for r in got["next"]}
        row("next", NEXT, got, {"duckdb": lambda: duckdb_next(con), "chdb": lambda: chdb_next(session),
                                "pm4py": lambda: pm4py_next(stream)},
            {"duckdb": duckdb_next(con) == following, "chdb": chdb_next(session) == following,
             "pm4py": pm4py_next(stream) == following},
            NEXT.replace("RETURN next 1", "RETURN count"),
            "pm4py orders a case's events by time (stable), as the store orders them")
        # durations
        got = ours(DURATIONS)
        d = got["durations"][0]
        mine_d = (d["count"], d["min_ms"], d["p50_ms"], d["p90_ms"], d["max_ms"])
        theirs = duckdb_durations(con)
        row("durations", DURATIONS, got, {"duckdb": lambda: duckdb_durations(con)},
            {"duckdb": all(math.isclose(a, b, abs_tol=1e-6) for a, b in zip(mine_d, theirs, strict=True))},
            DURATIONS.replace("RETURN durations", "RETURN count"))
        # count BY
        got = ours(GROUPS)
        listed = [(g["value"], g["count"]) for g in got["groups"]]
        row("count BY", GROUPS, got, {"duckdb": lambda: duckdb_groups(con)}, {"duckdb": duckdb_groups(con) == listed},
            GROUPS.replace(" BY a.org:resource TOP 10", ""))
        session.close()
    con.close()
    return rows


def run(quick: bool = False) -> dict[str, Any]:
    from bench.corpora import Corpora, replay_log

    corpora = Corpora()
    rounds = 3 if quick else 7
    rows = measure("bpi2012", corpora.bpic(), rounds)
    if not quick:
        rows += measure("replay-10m", replay_log(corpora.bpic_raw(), 38 * corpora.bpic().num_rows), 5)
    return {"rounds": rounds, "rows": rows,
            # equal wherever the semantics are the same (a difference is named in the row's notes)
            "all_equal": all(ok or "semantics differ" in r["notes"] for r in rows for ok in r["equal"].values()),
            "worst_over_fastest_peer": max(r["over_fastest_peer"] for r in rows),
            "worst_over_count": max(r["over_count"] for r in rows)}

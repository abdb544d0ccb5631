"""Ingest throughput and the XES reader's memory.

Figures (``python -m bench ingest [--quick]``):

- events/s of the whole ingest (read, stable ts sort, seq) and of the store write, for BPI 2012 (XES, gzip)
  and the Brown corpus (``text``, zip), phases side by side;
- peak resident memory (``VmHWM`` of a fresh subprocess; ``ru_maxrss`` would carry over the parent's peak
  across ``exec``) of the streaming XES reader on BPI 2012, next
  to an ElementTree parse of the whole document — the approach the streaming reader avoids — both above the
  fixed cost (the same reader on the 42-event log), so the ratio shows what streaming saves;
- a large stream made deterministically from BPI 2012 (replayed N times, each copy shifted past the previous
  one in time and given its own case ids): order + seq + store write throughput and the peak memory, to show
  that 5M+ events stay in compact Arrow form (N = 20 → 5,244,000 events; 4 with ``--quick``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.corpora import DEFAULT_DATA
from exact.ingest import IngestOptions, order_by_time, read_inputs, with_seq
from exact.store import EventStore

DATA = DEFAULT_DATA
_REPO = Path(__file__).resolve().parents[1]


def _timed(fn: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def ingest_throughput(path: Path, fmt: str) -> dict[str, Any]:
    raw, t_read = _timed(lambda: read_inputs([path], IngestOptions(fmt=fmt)))
    stream, t_order = _timed(lambda: with_seq(order_by_time(raw)))
    with tempfile.TemporaryDirectory() as tmp:
        _, t_store = _timed(lambda: EventStore.create(Path(tmp) / "store", stream))
        store_bytes = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file())
        seek_bytes = sum(f.stat().st_size for f in Path(tmp).rglob("*.seek"))
    n = stream.num_rows
    return {"input": path.name, "events": n, "read_s": round(t_read, 3), "order_and_seq_s": round(t_order, 3),
            "store_write_s": round(t_store, 3), "ingest_events_per_s": round(n / (t_read + t_order)),
            "read_events_per_s": round(n / t_read), "store_write_events_per_s": round(n / t_store),
            "end_to_end_events_per_s": round(n / (t_read + t_order + t_store)), "store_bytes": store_bytes,
            "seek_bytes": seek_bytes, "arrow_bytes": stream.nbytes}


_PROBES = {
    "streaming_reader": ("import exact.readers\nfrom pathlib import Path\n"
                         "n = sum(b.num_rows for b in exact.readers.read_events(Path(PATH)))"),
    "elementtree_whole_document": ("import gzip, xml.etree.ElementTree as ET\n"
                                   "root = ET.parse(gzip.open(PATH)).getroot()\n"
                                   "n = sum(1 for _ in root.iter('{http://www.xes-standard.org/}event'))"),
}


_HWM = """def hwm_mib():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1]) / 1024
"""


def peak_rss(snippet: str, path: Path) -> dict[str, Any]:
    """Peak RSS (MiB) and seconds of ``snippet`` in a fresh interpreter."""
    code = (f"PATH = {str(path)!r}\nimport time\nt0 = time.perf_counter()\n{snippet}\n"
            f"import json\n{_HWM}\n"
            "print(json.dumps({'mib': hwm_mib(), 'seconds': time.perf_counter() - t0}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=_REPO)
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    return {"peak_rss_mib": round(probe["mib"], 1), "seconds": round(probe["seconds"], 2)}


def xes_memory(path: Path) -> dict[str, Any]:
    figures = {name: peak_rss(snippet, path) for name, snippet in _PROBES.items()}
    # The fixed cost (interpreter, Arrow, the reader's first batch) measured on the 42-event log.
    tiny = DATA / "running-example.xes"
    figures["streaming_reader_on_tiny_log"] = peak_rss(_PROBES["streaming_reader"], tiny)
    base = figures["streaming_reader_on_tiny_log"]["peak_rss_mib"]
    streaming = figures["streaming_reader"]["peak_rss_mib"] - base
    whole = figures["elementtree_whole_document"]["peak_rss_mib"] - base
    figures["reader_mib_above_fixed_cost"] = round(streaming, 1)
    figures["elementtree_mib_above_fixed_cost"] = round(whole, 1)
    ratio = round(whole / streaming, 1) if streaming > 0 else None
    figures["memory_ratio_elementtree_over_streaming"] = ratio
    return figures


def large_stream(path: Path, copies: int) -> dict[str, Any]:
    code = f"""
import json, tempfile, time
from pathlib import Path
from exact.ingest import read_inputs, order_by_time, with_seq
from exact.store import EventStore
from bench.corpora import replay
{_HWM}
base = read_inputs([Path({str(path)!r})])
t0 = time.perf_counter()
big = replay(base, {copies})
t1 = time.perf_counter()
stream = with_seq(order_by_time(big))
t2 = time.perf_counter()
with tempfile.TemporaryDirectory() as tmp:
    store = EventStore.create(Path(tmp) / "store", stream)
    t3 = time.perf_counter()
    back = sum(b.num_rows for b in store.read())
    t4 = time.perf_counter()
print(json.dumps({{"events": stream.num_rows, "arrow_mib": stream.nbytes / 2**20, "make_s": t1 - t0,
                  "order_and_seq_s": t2 - t1, "store_write_s": t3 - t2, "full_read_s": t4 - t3,
                  "read_back": back,
                  "peak_rss_mib": hwm_mib()}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=_REPO)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    n = r["events"]
    return {"copies": copies, "events": n, "arrow_mib": round(r["arrow_mib"], 1),
            "peak_rss_mib": round(r["peak_rss_mib"], 1),
            "order_and_seq_events_per_s": round(n / r["order_and_seq_s"]),
            "store_write_events_per_s": round(n / r["store_write_s"]),
            "full_read_events_per_s": round(n / r["full_read_s"]), "read_back_ok": r["read_back"] == n}


def run(quick: bool = False) -> dict[str, Any]:
    bpic, brown = DATA / "bpic2012.xes.gz", DATA / "brown.zip"
    results: dict[str, Any] = {
        "bpic2012_xes": ingest_throughput(bpic, "auto"),
        "brown_text": ingest_throughput(brown, "text"),
        "xes_reader_memory_bpic2012": xes_memory(bpic),
        "large_stream_from_bpic2012": large_stream(bpic, 4 if quick else 20),
    }
    a, b = results["bpic2012_xes"], results["brown_text"]
    results["side_by_side"] = {
        "ingest_events_per_s": {
            "bpic2012_xes": a["ingest_events_per_s"], "brown_text": b["ingest_events_per_s"],
            "ratio_text_over_xes": round(b["ingest_events_per_s"] / a["ingest_events_per_s"], 1)},
        "store_write_events_per_s": {"bpic2012_xes": a["store_write_events_per_s"],
                                     "brown_text": b["store_write_events_per_s"]},
    }
    return results

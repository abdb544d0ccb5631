"""Crashes and damage: a build or an append killed at any point leaves the dataset exactly at its last
committed state, with an index equal to a rebuild; a damaged index or event-store file is refused, never
used silently.

Kills are real ``SIGKILL``s of real ``seqsketch`` processes:

- at every publishing step — the child runs the real CLI with ``os.replace``/``os.rename`` wrapped so that
  it kills itself just before the N-th such call, for N = 1, 2, … until the command completes; that visits
  every distinct on-disk state a killed process can leave (part files, index file, manifest, staging):
  between two renames only unreferenced files change, and a kill does not lose the page cache (an fsync
  matters for power loss, which a process kill cannot show);
- at random moments, from outside, of the ``seqsketch`` console script.

After each kill the dataset is reopened (a restart) and checked: its events are the old stream or the old
stream plus the whole batch, read back exactly; its index covers exactly those events and its digest
equals that of a tree rebuilt from the stored events (and the manifest's ``index_digest``); and the next
append works.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

import exact.store.writer as writer_module
from api.service import build_from_inputs as build_dataset
from exact.store import EventStore, dataset_dir, dataset_names, staged_dataset, store_dir, sweep_abandoned
from exact.store.manifest import REMOVED_GRACE_S
from exact.store.retention import Retention
from sketch.build_request import BuildRequest
from sketch.dataset import Dataset
from sketch.tree import BloomTree
from tests.system.faultkit import (
    assert_checkpoint_holds,
    assert_index_equals_rebuild,
    fresh_copy,
    later_events,
    stream,
)

REPO = Path(__file__).resolve().parents[2]

CHILD = r'''
"""Run the seqsketch CLI, killing this process just before the N-th rename (a publishing step)."""
import os
import signal
import sys

nth = int(os.environ["FAULT_KILL_AT"])
calls = 0


def arm(name):
    real = getattr(os, name)

    def step(*args, **kwargs):
        global calls
        calls += 1
        if calls == nth:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)

    setattr(os, name, step)


for name in ("replace", "rename", "link"):
    arm(name)

if os.environ.get("FAULT_NO_EXCHANGE"):  # as on a system that cannot swap two directories in one step
    import exact.store.dataset_paths

    exact.store.dataset_paths._exchange = lambda a, b: False

from api.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
'''


def child_env(home: Path) -> dict[str, str]:
    """The environment of a child process: its home, and this repository first on its path, so that a child
    started from a script elsewhere imports the code under test (not whatever the environment installed)."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "SEQSKETCH_HOME": str(home), "PYTHONPATH": path}


def run_child(home: Path, kill_at: int, args: list[str], script: Path, *, exchange: bool = True) -> int:
    env = {**child_env(home), "FAULT_KILL_AT": str(kill_at)}
    if not exchange:
        env["FAULT_NO_EXCHANGE"] = "1"
    done = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, timeout=120)
    if done.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"child failed: {done.returncode}: {done.stderr.decode()[-2000:]}")
    return done.returncode


def assert_committed_state(home: Path, name: str, candidates: list[pa.Table]) -> int:
    """The dataset holds exactly one of ``candidates`` (its committed states); returns which one."""
    table = stream(home, name).select(["ts", "type"])
    matches = [i for i, c in enumerate(candidates) if table.equals(c)]
    assert matches, f"{table.num_rows} events match no committed state " \
                    f"({[c.num_rows for c in candidates]})"
    assert_index_equals_rebuild(home, name)
    return matches[0]


def expected_tables(inputs: dict[str, Path], home: Path) -> tuple[pa.Table, pa.Table]:
    """The base stream and the base stream plus the batch, by the real ingest (the oracle is the build
    of both inputs at once, which the append must equal)."""
    before = stream(home, "ds").select(["ts", "type"])
    both = home.parent / f"{home.name}-oracle"
    build_dataset(both, "ds", [str(inputs["base"]), str(inputs["batch"])], BuildRequest(leaf_size=64))
    after = stream(both, "ds").select(["ts", "type"])
    shutil.rmtree(both)
    return before, after


@pytest.fixture(scope="module")
def child(tmp_path_factory: pytest.TempPathFactory) -> Path:
    script = tmp_path_factory.mktemp("fault-child") / "child.py"
    script.write_text(CHILD)
    return script


# --- kills at every durable step ----------------------------------------------------------------------------


def test_append_killed_at_every_step(tmp_path: Path, base_home: Path, inputs: dict[str, Path],
                                     child: Path) -> None:
    before, after = expected_tables(inputs, fresh_copy(base_home, tmp_path / "oracle-home"))
    seen = set()
    for kill_at in range(1, 40):
        home = fresh_copy(base_home, tmp_path / f"home-{kill_at}")
        code = run_child(home, kill_at, ["append", "ds", str(inputs["batch"]), "--json"], child)
        state = assert_committed_state(home, "ds", [before, after])
        seen.add(state)
        if code == 0:
            assert state == 1
            break
        # A restart: the next append completes and leaves nothing of the crash behind.
        build_dataset(home, "extra", [str(inputs["other"])])  # the home stays usable for other datasets
        age_leftovers(home, "ds")
        Dataset.open(home, "ds").append(later_events(stream(home, "ds")))
        assert_index_equals_rebuild(home, "ds")
        assert_no_leftovers(home, "ds")
        shutil.rmtree(home)
    else:
        pytest.fail("the append never completed")
    assert seen == {0, 1}, "kills should land both before and after the commit"
    assert kill_at >= 4  # noqa: B031 - the loop visited several steps before completing


def test_merge_retention_and_fold_killed_at_every_step(tmp_path: Path, base_home: Path, child: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``seqsketch compact`` retires what the policy no longer keeps, merges the appends' small parts and folds
    the tail into the partition layout, each in one commit.  Killed before any of its renames or log links,
    the dataset is one of its committed states — the events from its ``retained_from`` on, exactly, with a
    tree a build of the events from its first leaf makes — and a restart completes the work to the state an
    unbroken run reaches."""
    prep = fresh_copy(base_home, tmp_path / "prep")
    dataset = Dataset.open(prep, "ds")
    gap = 1000 * 86_400_000_000  # (the appends come a thousand days after the base: a day's policy retires it)
    for _ in range(12):  # twelve parts of 50 events within a day: one tier and stretch, more than a merge takes
        batch = later_events(stream(prep, "ds"))
        dataset.append(batch.set_column(0, "ts", pa.array([t.value + gap for t in batch.column("ts")],
                                                             batch.schema.field("ts").type)))
        gap = 0
    dataset.retain(Retention.parse("1 day"))
    whole = stream(prep, "ds")
    reference = fresh_copy(prep, tmp_path / "reference")
    Dataset.open(reference, "ds").compact()
    final = Dataset.open(reference, "ds").snapshot()
    assert final.store.retained_from > 0 and len(final.store.parts) < 13
    seen = set()
    for kill_at in range(1, 60):
        home = fresh_copy(prep, tmp_path / f"home-{kill_at}")
        code = run_child(home, kill_at, ["compact", "ds", "--json"], child)
        kept = assert_retained_state(home, "ds", whole)
        seen.add((kept, len(Dataset.open(home, "ds").snapshot().store.parts)))
        Dataset.open(home, "ds").compact()  # a restart: the work completes
        done = Dataset.open(home, "ds").snapshot()
        assert assert_retained_state(home, "ds", whole) == final.store.retained_from
        assert [(p.first_seq, p.last_seq) for p in done.store.parts] == \
            [(p.first_seq, p.last_seq) for p in final.store.parts]
        assert done.tree.digest() == final.tree.digest()
        age_leftovers(home, "ds")
        with monkeypatch.context() as patch:  # (the parts merges and retention replaced: past their grace)
            patch.setattr(writer_module, "REMOVED_GRACE_S", 0.0)
            patch.setattr(writer_module, "CLEAN_EVERY_S", 0.0)
            Dataset.open(home, "ds").append(later_events(stream(home, "ds")))
        assert_no_leftovers(home, "ds")
        shutil.rmtree(home)
        if code == 0:
            break
    else:
        pytest.fail("compact never completed")
    assert len(seen) >= 3, f"kills should land between the steps: {seen}"


def assert_retained_state(home: Path, name: str, whole: pa.Table) -> int:
    """The dataset holds exactly ``whole``'s events from its ``retained_from`` on, and its tree is a build of
    the events from its first leaf; returns ``retained_from``."""
    snap = Dataset.open(home, name).snapshot()
    kept = snap.store.retained_from
    assert stream(home, name).equals(whole.slice(kept))
    tree = snap.tree
    assert tree.n_events == whole.num_rows and tree.first_seq <= kept < tree.first_seq + tree.config.leaf_size \
        or (kept == 0 and tree.first_seq == 0)
    rebuilt = BloomTree(tree.config, first_leaf=tree.first_leaf)
    rest = whole.slice(tree.first_seq)
    rebuilt.update(rest.column("type"), rest.column("ts"))
    assert tree.digest() == rebuilt.digest()
    assert_checkpoint_holds(home, name, whole)
    return kept


def age_leftovers(home: Path, name: str) -> None:
    """Make every file of the dataset's parts folder older than the grace a write under way gets (a file no
    commit names may be a merge's, still being written, until then)."""
    past = time.time() - REMOVED_GRACE_S - 1
    root = dataset_dir(name, home)
    for folder in (store_dir(root) / "parts", root / "index", root / "partition"):
        for f in folder.iterdir() if folder.is_dir() else ():
            os.utime(f, (past, past))


def assert_no_leftovers(home: Path, name: str) -> None:
    """Files no commit names are removed by a write once they are older than the grace."""
    root = dataset_dir(name, home)
    snap = EventStore.open(store_dir(root)).snapshot()
    named = {f for p in snap.parts for f in p.files}  # each part's Parquet file and seek file
    parts = {p.name for p in (store_dir(root) / "parts").iterdir()}
    assert parts == named, f"leftover part files: {parts - named}"
    assert not list(store_dir(root).glob(".manifest.json.*.tmp"))
    assert not [p for p in (root / "index").iterdir() if p.name.startswith(".")]
    extra = snap.extra or {}
    files = {extra[k]["file"].rsplit("/", 1)[-1] for k in ("partition_index", "layout", "decay") if extra.get(k)}
    for folder, kinds in ((root / "index", ("ptree-", "decay-")), (root / "partition", ("layout-",))):
        unnamed = [p.name for p in folder.iterdir() if p.name.startswith(kinds) and p.name not in files] \
            if folder.is_dir() else []
        assert not unnamed, f"files no commit names: {unnamed}"


def hidden(home: Path) -> list[str]:
    folder = home / "datasets"
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) if folder.is_dir() else []


@pytest.mark.parametrize(("replace", "exchange"), [pytest.param(False, True, marks=pytest.mark.slow),
                                                   (True, True), (True, False)])
def test_build_killed_at_every_step(tmp_path: Path, base_home: Path, inputs: dict[str, Path], child: Path,
                                    replace: bool, exchange: bool) -> None:
    """A new build appears whole or not at all; a --replace build leaves the old dataset or the new one —
    at once where directories are swapped in one step, after the restart's sweep where it takes two renames.
    The next build leaves nothing of the killed one behind."""
    old = stream(base_home, "ds").select(["ts", "type"])
    oracle = tmp_path / "oracle"
    build_dataset(oracle, "ds", [str(inputs["other"])], BuildRequest(leaf_size=64))
    new = stream(oracle, "ds").select(["ts", "type"])
    args = ["build", "ds", str(inputs["other"]), "--engine", "local", "--leaf-size", "64", "--json"]
    for kill_at in range(1, 40):
        home = fresh_copy(base_home, tmp_path / f"home-{kill_at}")
        if not replace:
            shutil.rmtree(dataset_dir("ds", home))
        code = run_child(home, kill_at, args + (["--replace"] if replace else []), child, exchange=exchange)
        if not exchange:
            sweep_abandoned(home / "datasets")  # the restart
        if "ds" in dataset_names(home):
            state = assert_committed_state(home, "ds", [old, new] if replace else [new])
            assert replace or state == 0
        else:
            assert not replace, "a killed --replace build lost the old dataset"
            assert code != 0
        visible = [p.name for p in (home / "datasets").iterdir() if not p.name.startswith(".")]
        assert visible == (["ds"] if "ds" in dataset_names(home) else [])
        if code == 0:
            assert hidden(home) == []
            break
        build_dataset(home, "next", [str(inputs["other"])], BuildRequest(leaf_size=64))
        assert hidden(home) == [], "the next build should sweep what the killed one left"
        shutil.rmtree(home)
    else:
        pytest.fail("the build never completed")


def test_a_running_build_is_not_swept_a_dead_one_is(tmp_path: Path, base_home: Path) -> None:
    home = fresh_copy(base_home, tmp_path / "home")
    datasets = home / "datasets"
    with staged_dataset("live", home) as stage:
        (stage / "work").write_text("in progress")
        # a build killed long ago: its stage and a trash directory of a --replace, their owner gone
        (datasets / ".staging-gone-0123abcd").mkdir()
        (datasets / ".trash-ds-0123abcd").mkdir()
        (datasets / ".trash-lost-4567cdef").mkdir()
        (datasets / ".trash-lost-4567cdef" / "kept").write_text("the old dataset")
        assert sweep_abandoned(datasets) == ["ds-0123abcd", "gone-0123abcd", "lost-4567cdef"]
        assert stage.is_dir() and (stage / "work").read_text() == "in progress"
        assert "ds" in dataset_names(home)  # it existed: its trash was deleted, not moved back
        assert (datasets / "lost" / "kept").read_text() == "the old dataset"  # it did not: moved back
        assert [p for p in hidden(home) if not p.startswith(stage.name)] == []
    assert hidden(home) == []


def test_a_killed_spark_appends_staging_goes_with_the_next_write(tmp_path: Path, base_home: Path) -> None:
    home = fresh_copy(base_home, tmp_path / "home")
    left = dataset_dir("ds", home) / ".spark-staging-0123abcd"
    (left / "chunk").mkdir(parents=True)
    Dataset.open(home, "ds").append(later_events(stream(home, "ds")))
    assert not left.exists()


# --- kills at random moments, from outside ------------------------------------------------------------------


def seqsketch() -> list[str]:
    script = Path(sys.executable).with_name("seqsketch")
    return [str(script)] if script.exists() else [sys.executable, "-m", "api.cli"]


@pytest.mark.parametrize("attempts", [1, pytest.param(8, marks=pytest.mark.slow)])
def test_append_and_build_killed_at_random_moments(tmp_path: Path, base_home: Path, inputs: dict[str, Path],
                                                   attempts: int) -> None:
    before, after = expected_tables(inputs, fresh_copy(base_home, tmp_path / "oracle-home"))
    rng = random.Random(20260110 + attempts)
    for attempt in range(attempts):
        home = fresh_copy(base_home, tmp_path / f"home-{attempt}")
        env = child_env(home)
        for command in (["append", "ds", str(inputs["batch"])],
                        ["build", "fresh", str(inputs["other"]), "--engine", "local"]):
            process = subprocess.Popen(seqsketch() + command + ["--json"], env=env, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0.3, 2.5))  # the interpreter's start-up is part of the range on purpose
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
        assert_committed_state(home, "ds", [before, after])
        if "fresh" in dataset_names(home):
            assert_index_equals_rebuild(home, "fresh")
        shutil.rmtree(home)


# --- the server killed during a build job -------------------------------------------------------------------


def test_server_killed_during_a_build_job(tmp_path: Path) -> None:
    """``seqsketch serve`` killed while a build job runs: the dataset is absent or complete; after a restart
    the job is failed (interrupted) unless it had finished, and the build then succeeds again."""
    from api.client import Client, SeqsketchAPIError
    from bench.load import free_port, server_log

    home = tmp_path / "home"
    (home / "inputs").mkdir(parents=True)
    source = home / "inputs" / "big.jsonl"
    source.write_text("".join(f'{{"type": "T{i % 17}", "ts": {1_600_000_000 + i}, "case": {i % 97}}}\n'
                              for i in range(30_000)))

    def start() -> tuple[subprocess.Popen[bytes], Client]:
        port = free_port()
        log = open(home / "server.log", "ab")  # noqa: SIM115 - the child holds it; closed with the test
        process = subprocess.Popen([sys.executable, "-m", "api.cli", "serve", "--port", str(port)],
                                   env={**os.environ, "SEQSKETCH_HOME": str(home)}, stdout=subprocess.DEVNULL,
                                   stderr=log)
        client = Client(f"http://127.0.0.1:{port}", retries=0, timeout=30)
        for _ in range(300):
            try:
                client.health()
                return process, client
            except SeqsketchAPIError:
                assert process.poll() is None, server_log(home)
                time.sleep(0.1)
        raise AssertionError("the server did not start")

    process, client = start()
    try:
        job = client.build("big", ["big.jsonl"], engine="local")
        for _ in range(300):
            if client.job(job["job_id"])["state"] == "running":
                break
            time.sleep(0.05)
        time.sleep(random.Random(3).uniform(0.2, 1.5))
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        if "big" in dataset_names(home):  # the kill came after the build published: then it is whole
            assert_index_equals_rebuild(home, "big")
        process, client = start()
        assert hidden(home) == [], "the restarted server should sweep what the killed build left"
        state = client.job(job["job_id"])
        assert state["state"] in ("failed", "succeeded"), state
        if state["state"] == "failed":
            assert "stopped" in json.dumps(state), state
            assert "big" not in [d["name"] for d in client.datasets() if d.get("state") == "ready"]
        again = client.build("big", ["big.jsonl"], engine="local", replace=True)
        assert client.wait(again["job_id"], timeout=120)["state"] == "succeeded"
        assert client.info("big")["events"] == 30_000
        assert_index_equals_rebuild(home, "big")
    finally:
        process.kill()
        process.wait()


def test_replace_without_a_directory_exchange(tmp_path: Path, base_home: Path, inputs: dict[str, Path],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the system cannot exchange two directories, --replace falls back to two renames and still ends
    with the new dataset and no leftovers."""
    import exact.store.dataset_paths as datasets

    home = fresh_copy(base_home, tmp_path / "home")
    calls: list[tuple[Path, Path]] = []

    def unsupported(a: Path, b: Path) -> bool:
        calls.append((a, b))
        return False

    monkeypatch.setattr(datasets, "_exchange", unsupported)
    build_dataset(home, "ds", [str(inputs["other"])], BuildRequest(replace=True, leaf_size=64))
    assert len(calls) == 1
    assert stream(home, "ds").num_rows == 300
    assert_index_equals_rebuild(home, "ds")
    assert [p.name for p in (home / "datasets").iterdir()] == ["ds"]


def test_the_directory_exchange_swaps_in_one_step(tmp_path: Path) -> None:
    from exact.store.dataset_paths import _exchange

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "which").write_text("a")
    (b / "which").write_text("b")
    if not _exchange(a, b):
        pytest.skip("this system cannot exchange directories (the two-rename fallback is tested above)")
    assert (a / "which").read_text() == "b" and (b / "which").read_text() == "a"


def test_a_read_overtaken_by_a_replace_is_a_conflict_not_damage(tmp_path: Path, base_home: Path,
                                                               inputs: dict[str, Path]) -> None:
    """A reader holding the old snapshot while --replace swaps the dataset gets a retryable 409 conflict;
    a part that the live manifest still names but that is gone is damage (store_corrupt)."""
    from exact.errors import Conflict, StoreCorrupt

    home = fresh_copy(base_home, tmp_path / "home")
    store = EventStore.open(store_dir(dataset_dir("ds", home)))
    old = store.snapshot()
    build_dataset(home, "ds", [str(inputs["other"])], BuildRequest(replace=True, leaf_size=64))
    with pytest.raises(Conflict, match="replaced or deleted"):
        store.read_table(snapshot=old)
    assert store.read_table().num_rows == 300  # a retry reads the new dataset
    live = store.snapshot()
    (store.root / "parts" / live.parts[0].file).unlink()
    with pytest.raises(StoreCorrupt, match="missing"):
        store.read_table()

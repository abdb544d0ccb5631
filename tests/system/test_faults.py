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

from api.service import build_from_inputs as build_dataset
from api.service import dataset_info
from exact.errors import IndexCorrupt, SeqsketchError
from exact.store import EventStore, dataset_dir, dataset_names, staged_dataset, store_dir, sweep_abandoned
from sketch.dataset import Dataset
from sketch.tree import BloomTree

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


for name in ("replace", "rename"):
    arm(name)

if os.environ.get("FAULT_NO_EXCHANGE"):  # as on a system that cannot swap two directories in one step
    import exact.store.datasets

    exact.store.datasets._exchange = lambda a, b: False

from api.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
'''

BASE_EVENTS = 600
BATCH_EVENTS = 900


def jsonl(path: Path, first: int, count: int, start_ts: int) -> Path:
    rng = random.Random(first)
    lines = [f'{{"type": "T{rng.randrange(40)}", "ts": {start_ts + (first + i) * 7}, "case": {i % 13}}}\n'
             for i in range(count)]
    path.write_text("".join(lines))
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("fault-inputs")
    return {"base": jsonl(folder / "base.jsonl", 0, BASE_EVENTS, 1_600_000_000),
            "batch": jsonl(folder / "batch.jsonl", BASE_EVENTS, BATCH_EVENTS, 1_600_000_000),
            "other": jsonl(folder / "other.jsonl", 10_000, 300, 1_500_000_000)}


@pytest.fixture(scope="module")
def base_home(tmp_path_factory: pytest.TempPathFactory, inputs: dict[str, Path]) -> Path:
    home = tmp_path_factory.mktemp("fault-base")
    build_dataset(home, "ds", [str(inputs["base"])], leaf_size=64)
    return home


def fresh_copy(base_home: Path, target: Path) -> Path:
    shutil.copytree(base_home, target, symlinks=True)
    return target


def stream(home: Path, name: str) -> pa.Table:
    store = EventStore.open(store_dir(dataset_dir(name, home)))
    return store.read_table(columns=["seq", "ts", "type"])


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


def assert_index_equals_rebuild(home: Path, name: str) -> None:
    """The live index covers exactly the stored events and equals a tree built from them at once."""
    snap = Dataset.open(home, name).snapshot()
    table = stream(home, name)
    assert snap.events == table.num_rows == snap.tree.n_events
    assert table.column("seq").to_pylist() == list(range(table.num_rows))
    rebuilt = BloomTree(snap.tree.config)
    rebuilt.update(table.column("type"), table.column("ts"))
    assert snap.tree.digest() == rebuilt.digest() == snap.index.index_digest
    assert dataset_info(home, name)["index"]["index_digest"] == rebuilt.digest()


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
    build_dataset(both, "ds", [str(inputs["base"]), str(inputs["batch"])], leaf_size=64)
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
        Dataset.open(home, "ds").append(_later_events(stream(home, "ds")))
        assert_index_equals_rebuild(home, "ds")
        assert_no_leftovers(home, "ds")
        shutil.rmtree(home)
    else:
        pytest.fail("the append never completed")
    assert seen == {0, 1}, "kills should land both before and after the commit"
    assert kill_at >= 4  # noqa: B031 - the loop visited several steps before completing


def _later_events(current: pa.Table) -> pa.Table:
    last = current.column("ts")[-1].value
    return pa.table({"ts": pa.array([last + i for i in range(1, 51)], pa.timestamp("us", tz="UTC")),
                     "type": [f"R{i % 3}" for i in range(50)]})


def assert_no_leftovers(home: Path, name: str) -> None:
    """Files the manifest does not name are removed by the next write."""
    root = dataset_dir(name, home)
    snap = EventStore.open(store_dir(root)).snapshot()
    named = {f for p in snap.parts for f in p.files}  # each part's Parquet file and seek file
    parts = {p.name for p in (store_dir(root) / "parts").iterdir()}
    assert parts == named, f"leftover part files: {parts - named}"
    assert not list(store_dir(root).glob(".manifest.json.*.tmp"))
    assert not [p for p in (root / "index").iterdir() if p.name.startswith(".")]


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
    build_dataset(oracle, "ds", [str(inputs["other"])], leaf_size=64)
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
        build_dataset(home, "next", [str(inputs["other"])], leaf_size=64)
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
    Dataset.open(home, "ds").append(_later_events(stream(home, "ds")))
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


# --- damaged files ------------------------------------------------------------------------------------------


def damaged_copies(path: Path, rng: random.Random, count: int) -> list[bytes]:
    data = path.read_bytes()
    out = [data[: len(data) // 2], data[:-1], data + b"\x00", data[:64], b""]
    for _ in range(count):
        flipped = bytearray(data)
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        out.append(bytes(flipped))
    return out


def live_index_file(home: Path, name: str) -> Path:
    snap = EventStore.open(store_dir(dataset_dir(name, home))).snapshot()
    return dataset_dir(name, home) / snap.extra["index"]["file"]


def test_a_damaged_index_is_refused_never_used(tmp_path: Path, base_home: Path,
                                               inputs: dict[str, Path]) -> None:
    from api.service import run_query

    home = fresh_copy(base_home, tmp_path / "home")
    path = live_index_file(home, "ds")
    original = path.read_bytes()
    manifest = (store_dir(dataset_dir("ds", home)) / "manifest.json").read_bytes()
    digest = Dataset.open(home, "ds").snapshot().tree.digest()
    rng = random.Random(7)
    refused = 0
    for damaged in damaged_copies(path, rng, 25):
        path.write_bytes(damaged)
        try:
            tree = Dataset.open(home, "ds").snapshot().tree
        except IndexCorrupt as err:
            assert str(path) in str(err)
            refused += 1
        else:
            # Loaded: every checksum held, so the damage hit alignment padding outside the sections and
            # the content is the very same (its digest is recomputed from the bits on load).
            assert tree.digest() == digest
            continue
        with pytest.raises(IndexCorrupt):
            run_query(home, "ds", "PATTERN SEQ(T1 a, T2 b)", mode="verified")
        with pytest.raises(IndexCorrupt):
            dataset_info(home, "ds")
        with pytest.raises(IndexCorrupt):  # an append does not build on a damaged index
            Dataset.open(home, "ds").append(_later_events(stream(home, "ds")))
        assert (store_dir(dataset_dir("ds", home)) / "manifest.json").read_bytes() == manifest
    assert refused >= 20
    path.write_bytes(original)
    assert_index_equals_rebuild(home, "ds")
    # Exact mode needs no index and still answers while the index is damaged.
    path.write_bytes(original[:-1])
    assert run_query(home, "ds", "PATTERN SEQ(T1 a, T2 b)", mode="exact")["exists"] in (True, False)


def test_a_damaged_index_is_refused_over_http(tmp_path: Path, base_home: Path) -> None:
    from api.app import create_app
    from api.state import service_state

    home = fresh_copy(base_home, tmp_path / "home")
    app = create_app({"SEQSKETCH_HOME": str(home), "DATABASE_URL": f"sqlite:///{home / 'catalog.db'}",
                      "INPUT_ROOTS": [str(home)]})
    try:
        client = app.test_client()
        assert client.post("/v1/datasets/ds/query", json={"query": "PATTERN T1 a"}).status_code == 200
        path = live_index_file(home, "ds")
        data = bytearray(path.read_bytes())
        data[len(data) // 3] ^= 0x10
        path.write_bytes(bytes(data))
        for mode in ("verified", "approximate"):
            response = client.post("/v1/datasets/ds/query", json={"query": "PATTERN T1 a", "mode": mode})
            assert response.status_code == 500 and response.json["error"]["code"] == "index_corrupt", \
                response.get_data(as_text=True)
            assert "index" in response.json["error"]["message"]
        append = client.post("/v1/datasets/ds/events", json=[{"type": "Z", "ts": "2030-01-01T00:00:00Z"}])
        assert append.json["error"]["code"] == "index_corrupt"
    finally:
        state = service_state(app)
        assert state.jobs is not None
        state.jobs.shutdown()
        state.catalog.dispose()


def test_a_damaged_store_part_gives_a_clear_error(tmp_path: Path, base_home: Path) -> None:
    from api.service import run_query

    home = fresh_copy(base_home, tmp_path / "home")
    snap = EventStore.open(store_dir(dataset_dir("ds", home))).snapshot()
    path = store_dir(dataset_dir("ds", home)) / "parts" / snap.parts[0].file
    original = path.read_bytes()
    expected = stream(home, "ds")
    query = "PATTERN SEQ(T1 a, T2 b)"
    answer = run_query(home, "ds", query, mode="exact")
    rng = random.Random(11)
    for damaged in damaged_copies(path, rng, 30):
        path.write_bytes(damaged)
        try:
            table = stream(home, "ds")
        except SeqsketchError as err:
            assert err.code == "store_corrupt" and str(path) in str(err), err
            # a query the part's seek file serves (it has its own checksum) answers as before the damage,
            # or, where the damage shows (the part's size), is refused; never a wrong answer
            try:
                again = run_query(home, "ds", query, mode="exact")
            except SeqsketchError as refused:
                assert refused.code == "store_corrupt" and "damaged" in str(refused)
            else:
                assert again["matches"] == answer["matches"] and again["count"] == answer["count"]
            continue
        # Read without error: then it must be the very same data (the flip hit padding or statistics).
        assert table.equals(expected), "damaged part read back different events without an error"
    path.write_bytes(original)
    assert stream(home, "ds").equals(expected)


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
    import exact.store.datasets as datasets

    home = fresh_copy(base_home, tmp_path / "home")
    calls: list[tuple[Path, Path]] = []

    def unsupported(a: Path, b: Path) -> bool:
        calls.append((a, b))
        return False

    monkeypatch.setattr(datasets, "_exchange", unsupported)
    build_dataset(home, "ds", [str(inputs["other"])], replace=True, leaf_size=64)
    assert len(calls) == 1
    assert stream(home, "ds").num_rows == 300
    assert_index_equals_rebuild(home, "ds")
    assert [p.name for p in (home / "datasets").iterdir()] == ["ds"]


def test_the_directory_exchange_swaps_in_one_step(tmp_path: Path) -> None:
    from exact.store.datasets import _exchange

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
    build_dataset(home, "ds", [str(inputs["other"])], replace=True, leaf_size=64)
    with pytest.raises(Conflict, match="replaced or deleted"):
        store.read_table(snapshot=old)
    assert store.read_table().num_rows == 300  # a retry reads the new dataset
    live = store.snapshot()
    (store.root / "parts" / live.parts[0].file).unlink()
    with pytest.raises(StoreCorrupt, match="missing"):
        store.read_table()

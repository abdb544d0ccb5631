"""Damage: a damaged index or event-store file is refused with a clear error, never used silently — through
the library and over HTTP."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from api.service import dataset_info
from exact.errors import IndexCorrupt, SeqsketchError
from exact.store import EventStore, dataset_dir, store_dir
from sketch.dataset import Dataset
from tests.system.faultkit import assert_index_equals_rebuild, fresh_copy, later_events, stream

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
            Dataset.open(home, "ds").append(later_events(stream(home, "ds")))
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

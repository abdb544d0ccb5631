"""Fixtures of the system tests: the crash and damage tests' inputs and the home built from them once per
module."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.service import build_from_inputs as build_dataset
from sketch.build_request import BuildRequest
from tests.system.faultkit import BASE_EVENTS, BATCH_EVENTS, jsonl


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("fault-inputs")
    return {"base": jsonl(folder / "base.jsonl", 0, BASE_EVENTS, 1_600_000_000),
            "batch": jsonl(folder / "batch.jsonl", BASE_EVENTS, BATCH_EVENTS, 1_600_000_000),
            "other": jsonl(folder / "other.jsonl", 10_000, 300, 1_500_000_000)}


@pytest.fixture(scope="module")
def base_home(tmp_path_factory: pytest.TempPathFactory, inputs: dict[str, Path]) -> Path:
    home = tmp_path_factory.mktemp("fault-base")
    build_dataset(home, "ds", [str(inputs["base"])], BuildRequest(leaf_size=64))
    return home

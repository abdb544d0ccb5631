"""A server out of open files answers ``503 out_of_resources`` with a ``Retry-After``, never a report of
damage (``store_corrupt``, ``index_corrupt``), a miss (``not_found``) or ``internal``; once files are free
again the same question answers as before.  Each ``seqsketch`` process raises its own soft limit first."""

from __future__ import annotations

import errno
import gc
import os
import resource
import threading
from collections.abc import Iterator

import pytest
from flask.testing import FlaskClient

from api.rlimits import raise_open_file_limit
from exact.errors import OutOfResources, StoreCorrupt, out_of_resources
from sketch.store_info import forget_open_files

QUESTION = {"query": "PATTERN SEQ('check ticket' a, decide b) PARTITION BY case RETURN count", "mode": "verified"}


@pytest.fixture
def soft_limit() -> Iterator[list[int]]:
    """Lets a test lower this process's soft limit of open files; put back afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered: list[int] = []
    yield lowered
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_out_of_open_files_is_503_and_nothing_is_marked_damaged(client: FlaskClient, running: str,
                                                                 soft_limit: list[int]) -> None:
    url = f"/v1/datasets/{running}/query"
    before = client.post(url, json=QUESTION)
    assert before.status_code == 200, before.get_data(as_text=True)
    forget_open_files()  # (the next question opens its files again)
    for thread in threading.enumerate():  # (the app's warm-up would run out too: let it end first)
        if thread.name == "seqsketch-warm-up":
            thread.join(120)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    gc.collect()  # (files earlier tests left to the collector are closed now, not during the question)
    gc.disable()
    fillers: list[int] = []
    try:
        held = len(os.listdir("/proc/self/fd"))
        soft_limit.append(held)
        resource.setrlimit(resource.RLIMIT_NOFILE, (held + 16, hard))
        try:
            while True:  # every descriptor left taken: no file can be opened now
                fillers.append(os.open(os.devnull, os.O_RDONLY))
        except OSError as full:
            assert full.errno == errno.EMFILE
        starved = client.post(url, json=QUESTION)
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        gc.enable()
    assert starved.status_code == 503, starved.get_data(as_text=True)
    assert starved.json["error"]["code"] == "out_of_resources"
    assert "open files" in starved.json["error"]["message"]
    assert starved.headers["Retry-After"] == "1"
    after = client.post(url, json=QUESTION)
    assert after.status_code == 200, after.get_data(as_text=True)
    assert after.json["count"] == before.json["count"] and before.json["count"] > 0


def test_damage_reported_from_running_out_is_recognised_as_running_out() -> None:
    try:
        try:
            raise OSError(errno.EMFILE, "Too many open files")
        except OSError as err:
            raise StoreCorrupt(f"damaged event-store part: {err}", where="part-1.parquet") from None
    except StoreCorrupt as reported:
        found = out_of_resources(reported)
    assert isinstance(found, OutOfResources) and found.http_status == 503
    assert out_of_resources(StoreCorrupt("damaged event-store part: bad page", where="p")) is None
    assert out_of_resources(OSError(errno.ENOENT, "gone")) is None


def test_a_process_raises_its_soft_limit_up_to_the_hard_one(soft_limit: list[int]) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(4096, hard) if hard != resource.RLIM_INFINITY else 4096
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 256, wanted), hard))
    assert raise_open_file_limit(wanted) == wanted
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == wanted
    assert raise_open_file_limit(16) == wanted  # (never lowered)

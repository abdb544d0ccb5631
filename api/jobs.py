"""The job runner: claims queued build jobs from the catalog and runs them, outside the request workers.

A build asked for over HTTP is a catalog row (:class:`api.catalog.BuildJob`) that moves ``queued → running →
succeeded | failed``.  A request worker only queues it (:func:`api.service.queue_build`); a runner — the
process ``seqsketch jobs run`` (which ``seqsketch serve`` starts beside its request workers), or, for tests
and single-process setups, a :class:`JobRunner` on a thread of the app — claims it with one conditional
``UPDATE`` (:func:`api.service.claim_job`) and has the service run it (:func:`api.service.run_job`: the build
under its dataset's lock, its progress, result or error written back).  So any process reading the catalog
sees the job, and several runners never run one job twice.

Each runner holds an exclusive ``flock`` on ``$SEQSKETCH_HOME/runners/<id>.lock`` for its life, and marks the
jobs it claims with its id.  The system releases the lock when the runner's process dies, however it dies;
so a runner starting (and every half minute after) can tell the running jobs whose runner is gone and settle
them — recorded as succeeded when their build had published, else failed with code ``interrupted`` — while
the jobs of runners still alive are left alone (:func:`api.service.settle_abandoned_jobs`, which also removes
what killed builds left on disk).  The runner owns its life — processes, threads, its lock — and nothing of
what happens to the catalog or the disk for a job.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from api import service
from api.catalog import Catalog
from api.service import DatasetLocks, Deliverer, Job

log = logging.getLogger(__name__)

#: How often an idle runner looks for queued jobs (a job queued in its own process wakes it at once).
POLL_S = 1.0
#: How often a runner looks for running jobs whose runner died.
RECOVER_EVERY_S = 30.0
INTERRUPTED = "the job runner stopped before the job finished"


def runners_dir(home: Path) -> Path:
    return home / "runners"


def _runner_id() -> str:
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:64] or "host"
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def runner_alive(home: Path, runner: str) -> bool:
    """Does the runner ``runner`` still hold its lock?  (A missing lock file means it is gone.)"""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", runner):
        return False
    path = runners_dir(home) / f"{runner}.lock"
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        path.unlink(missing_ok=True)  # its owner is gone: nobody will take this lock again
        return False
    finally:
        os.close(fd)


class JobRunner:
    """Claims queued build jobs and runs them, ``workers`` at a time, on threads of this process.

    ``start()`` settles what dead runners left and returns with the workers running in the background (a
    runner in the app, for tests); :meth:`run` does the same and blocks until ``stop`` is set (the
    ``seqsketch jobs run`` process).  The service runs each job and keeps the catalog and the disk (job
    states, progress, errors, the dataset's catalog row and its live index version); the runner owns its
    threads and its lock.
    """

    def __init__(self, catalog: Catalog, home: Path, *, locks: DatasetLocks | None = None, workers: int = 1,
                 poll: float = POLL_S) -> None:
        self.catalog = catalog
        self.home = home
        self.locks = locks or DatasetLocks()
        self.workers = max(1, int(workers))
        self.poll = poll
        self.id = _runner_id()
        self._stop = threading.Event()
        self._wakeup = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock_fd: int | None = None
        self._recovered_at = 0.0
        self._recover_lock = threading.Lock()
        self._webhooks: Deliverer | None = None

    # --- life cycle -------------------------------------------------------------------------------------

    def start(self) -> JobRunner:
        """Take the runner's lock, settle abandoned jobs, and start the workers; returns at once."""
        self._hold_lock()
        self.recover()
        for i in range(self.workers):
            thread = threading.Thread(target=self._work, name=f"seqsketch-build-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self._webhooks = Deliverer(self.catalog, self.home).start()  # the watches' webhooks, beside the builds
        upkeep = threading.Thread(target=self._maintain, name="seqsketch-upkeep", daemon=True)
        upkeep.start()
        self._threads.append(upkeep)
        return self

    def run(self, stop: threading.Event, *, grace: float = 30.0, ready: Any = None) -> None:
        """:meth:`start`, call ``ready()``, then block until ``stop`` is set; builds still running ``grace``
        seconds after that are left to the next runner's recovery (the process is about to end)."""
        self.start()
        if ready is not None:
            ready()
        while not stop.wait(1.0):
            pass
        self.shutdown(wait=True, timeout=grace)

    def shutdown(self, wait: bool = True, timeout: float | None = None) -> None:
        """Stop claiming jobs; with ``wait``, let running builds finish (at most ``timeout`` seconds)."""
        self._stop.set()
        self._wakeup.set()
        if self._webhooks is not None:
            self._webhooks.shutdown()
        if wait:
            deadline = None if timeout is None else time.monotonic() + timeout
            for thread in self._threads:
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if all(not t.is_alive() for t in self._threads):
            self._release_lock()

    def drain(self) -> int:
        """Run queued jobs in the calling thread until none is left (``seqsketch jobs run --once``); the
        number run.  Takes the runner's lock and settles dead runners' jobs first; :meth:`shutdown` after."""
        if self._lock_fd is None:
            self._hold_lock()
            self.recover()
        ran = 0
        while (job := service.claim_job(self.catalog, self.id)) is not None:
            self._run(job)
            ran += 1
        return ran

    def wake(self) -> None:
        """A job was queued in this process: look now rather than at the next poll."""
        self._wakeup.set()

    def wait(self, job_id: str, timeout: float | None = None) -> Job:
        """Block until the job has finished (for tests and scripts); the job as the catalog has it."""
        return service.wait_for_job(self.catalog, job_id, timeout)

    def _hold_lock(self) -> None:
        folder = runners_dir(self.home)
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / f"{self.id}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a fresh name: nobody else holds it
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            (runners_dir(self.home) / f"{self.id}.lock").unlink(missing_ok=True)
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- recovery ---------------------------------------------------------------------------------------

    def recover(self) -> tuple[list[str], list[str]]:
        """Settle the running jobs whose runner is gone and remove what killed builds left on disk;
        ``(recorded, failed)`` job ids."""
        with self._recover_lock:
            self._recovered_at = time.monotonic()
            settled = service.settle_abandoned_jobs(self.catalog, self.home, self._gone, INTERRUPTED)
        recorded, failed, swept = settled.recorded, settled.failed, settled.swept
        if recorded:
            log.warning("recorded %d build job(s) that had published before their runner stopped: %s",
                        len(recorded), ", ".join(recorded))
        if failed:
            log.warning("marked %d build job(s) failed whose runner stopped: %s", len(failed),
                        ", ".join(failed))
        if swept:
            log.warning("removed what %d killed build(s) left: %s", len(swept), ", ".join(swept))
        return recorded, failed

    def _gone(self, job: Job) -> bool:
        """Has the runner of running job ``job`` stopped?  (Never this runner: it is alive.)"""
        return job["runner"] != self.id and not (job["runner"] and runner_alive(self.home, job["runner"]))

    # --- the work ---------------------------------------------------------------------------------------

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                job = service.claim_job(self.catalog, self.id)
            except Exception:  # the catalog is unreachable for a moment: try again at the next poll
                log.exception("job runner %s could not look for queued jobs", self.id)
                job = None
            if job is not None:
                self._run(job)
                continue
            self._wakeup.wait(self.poll)
            self._wakeup.clear()
            if time.monotonic() - self._recovered_at > RECOVER_EVERY_S and not self._stop.is_set():
                try:
                    self.recover()
                except Exception:
                    log.exception("job runner %s could not settle abandoned jobs", self.id)

    def _run(self, job: Job) -> None:
        service.run_job(self.catalog, self.home, self.locks, job)

    def _maintain(self) -> None:
        """The datasets' upkeep (merges, the layout folded), every :data:`api.service.MAINTAIN_EVERY_S`."""
        while not self._stop.wait(service.MAINTAIN_EVERY_S):
            try:
                service.maintain_datasets(self.home)
            except Exception:  # a moment's trouble: again at the next round
                log.exception("job runner %s could not keep the datasets up", self.id)

"""``seqsketch serve`` and ``seqsketch jobs run``: the HTTP service on a production WSGI server, and the job
runner that runs its builds.

``serve`` is three kinds of process: the gunicorn master (this process), which forks ``--workers`` request
workers — each an event loop that parses HTTP strictly, serves watch streams itself and runs the app on
``--threads`` threads (:mod:`api.server`) — and one job-runner process (``seqsketch jobs run``), started
first and waited for until it has settled what a previous run left.  The master restarts a
runner that dies; a runner whose master is killed dies with it (``PR_SET_PDEATHSIG``), and its unfinished
job is settled by the next runner.  ``--server werkzeug`` serves from one process with Werkzeug's
development server instead (for development, and the load benchmark's comparison).
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from api.cli.output import common, positive_int

log = logging.getLogger("seqsketch.serve")

SERVERS = ("gunicorn", "werkzeug")


def register(sub: argparse._SubParsersAction) -> None:
    for add in (add_serve, add_jobs):
        add(sub)


def _log_to_stderr(who: str) -> None:
    """Warnings of every library, and what the service itself says, on stderr."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format=f"{who}: %(levelname)s %(message)s")
    for name in ("api", "seqsketch"):
        logging.getLogger(name).setLevel(logging.INFO)


def _default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def add_serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the HTTP service and its web console (gunicorn) and the job runner")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    p.add_argument("--workers", type=positive_int, default=_default_workers(),
                   help="request worker processes (default: the number of cores, here "
                        f"{_default_workers()})")
    p.add_argument("--threads", type=positive_int, default=4, help="threads per worker (default 4)")
    p.add_argument("--timeout", type=positive_int, default=120, metavar="SECONDS",
                   help="a worker silent this long is restarted (default 120; a query's own limit is "
                        "SEQSKETCH_QUERY_TIMEOUT_MS)")
    p.add_argument("--graceful-timeout", type=positive_int, default=30, metavar="SECONDS",
                   help="on stop or restart, how long requests and running builds may take to finish "
                        "(default 30)")
    p.add_argument("--keep-alive", type=int, default=5, metavar="SECONDS",
                   help="how long an idle connection is kept open (default 5)")
    p.add_argument("--build-workers", type=positive_int, default=None,
                   help="builds the job runner runs at once (default SEQSKETCH_BUILD_WORKERS, or 1)")
    p.add_argument("--server", choices=SERVERS, default="gunicorn",
                   help="gunicorn (default), or werkzeug: Werkzeug's development server in one process")
    common(p)
    p.set_defaults(handler=_serve)


def add_jobs(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("jobs", help="the job runner: runs the build jobs queued over HTTP")
    actions = p.add_subparsers(dest="jobs_action", required=True)
    run = actions.add_parser("run", help="claim and run queued build jobs until stopped (seqsketch serve "
                                         "starts one)")
    run.add_argument("--workers", type=positive_int, default=None,
                     help="builds run at once (default SEQSKETCH_BUILD_WORKERS, or 1)")
    run.add_argument("--once", action="store_true", help="run the jobs queued now, then exit")
    run.add_argument("--grace", type=float, default=30.0, metavar="SECONDS",
                     help="on stop, how long running builds may take to finish (default 30); a build still "
                          "running then is failed (interrupted) by the next runner")
    run.add_argument("--ready-fd", type=int, default=None, help=argparse.SUPPRESS)
    common(run)
    p.set_defaults(handler=_jobs)


# --- the job runner --------------------------------------------------------------------------------------


def _jobs(args: argparse.Namespace) -> int:
    from api.catalog import open_catalog
    from api.db import seqsketch_home
    from api.jobs import JobRunner
    from api.state import default_config

    _log_to_stderr("seqsketch jobs")
    workers = args.workers or int(default_config()["BUILD_WORKERS"])
    catalog = open_catalog()
    runner = JobRunner(catalog, seqsketch_home(), workers=workers)
    try:
        if args.once:  # in this thread, one job after another, until none is queued
            try:
                runner.drain()
            finally:
                runner.shutdown()
            return 0
        stop = threading.Event()

        def on_signal(signum: int, _frame: Any) -> None:
            if stop.is_set():
                raise KeyboardInterrupt  # a second signal: do not wait for the builds
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

        def ready() -> None:
            log.info("job runner %s ready (%d worker(s))", runner.id, workers)
            if args.ready_fd is not None:
                os.write(args.ready_fd, b"ready\n")
                os.close(args.ready_fd)

        runner.run(stop, grace=args.grace, ready=ready)
    finally:
        catalog.dispose()
    return 0


class RunnerProcess:
    """The job runner as a child process of ``seqsketch serve``: started and waited for until ready,
    restarted if it dies, stopped with the server."""

    def __init__(self, workers: int | None, grace: float) -> None:
        self.workers = workers
        self.grace = grace
        self.process: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self._last_start = 0.0

    def start(self, timeout: float = 300.0) -> None:
        from exact.errors import SeqsketchError

        read_end, write_end = os.pipe()
        command = [sys.executable, "-m", "api.cli", "jobs", "run", "--ready-fd", str(write_end),
                   "--grace", str(self.grace)]
        if self.workers:
            command += ["--workers", str(self.workers)]
        parent = os.getpid()
        self._last_start = time.monotonic()
        try:
            self.process = subprocess.Popen(command, pass_fds=(write_end,),
                                            preexec_fn=lambda: _die_with(parent))  # noqa: PLW1509
        finally:
            os.close(write_end)
        try:
            ready, _, _ = select.select([read_end], [], [], timeout)
            said = os.read(read_end, 64) if ready else b""
        finally:
            os.close(read_end)
        if said.strip() != b"ready":
            self.process.kill()
            self.process.wait()
            raise SeqsketchError("the job runner did not start; see the lines above",
                                 where="seqsketch jobs run")

    def check(self) -> None:
        """Restart the runner if it died (at most once every few seconds)."""
        if self.stopping or self.process is None or self.process.poll() is None:
            return
        if time.monotonic() - self._last_start < 5.0:
            return
        log.warning("the job runner exited (status %s); starting another", self.process.returncode)
        try:
            self.start()
        except Exception as err:  # try again on the next check
            log.error("could not restart the job runner: %s", err)

    def stop(self) -> None:
        self.stopping = True
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=self.grace + 10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _die_with(parent: int) -> None:
    """In the runner's child process before exec: be killed when ``parent`` dies (Linux), so that a killed
    server leaves no runner behind; and ignore the terminal's Ctrl-C, which the server passes on."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)  # the server died before the line above
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# --- serve -----------------------------------------------------------------------------------------------


def _serve(args: argparse.Namespace) -> int:
    from api.auth import check_bind_allowed
    from api.catalog import open_catalog
    from exact.errors import SeqsketchError

    _log_to_stderr("seqsketch serve")
    catalog = open_catalog()  # checks the schema, and makes an empty SQLite catalog once, here
    try:
        check_bind_allowed(catalog, args.host)  # no tokens → loopback only
    finally:
        catalog.dispose()
    if args.server == "werkzeug":
        listener = None
    else:
        listener = _listen(args.host, args.port)  # a clear error before anything starts
    runner = RunnerProcess(args.build_workers, float(args.graceful_timeout))
    runner.start()
    try:
        if args.server == "werkzeug":
            return _serve_werkzeug(args, runner)
        return _serve_gunicorn(args, runner, listener)
    except SeqsketchError:
        raise
    finally:
        runner.stop()


def _listen(host: str, port: int) -> Any:
    import socket

    from exact.errors import SeqsketchError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise SeqsketchError(f"cannot listen on {host}:{port}: {err.strerror or err}",
                             where="--port") from None
    sock.listen(2048)
    return sock


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _announce(args: argparse.Namespace, port: int, how: str, runner: RunnerProcess) -> None:
    url = _url(args.host, port)
    pid = runner.process.pid if runner.process else "-"
    print(f"seqsketch: serving {url}/v1 and the web console at {url}/ ({how}; job runner pid {pid}; "
          "Ctrl-C stops)", file=sys.stderr, flush=True)


def _serve_werkzeug(args: argparse.Namespace, runner: RunnerProcess) -> int:
    from werkzeug.serving import make_server

    from api.app import create_app
    from exact.errors import SeqsketchError

    app = create_app({"JOB_RUNNER": "external"})
    try:
        server = make_server(args.host, args.port, app, threaded=True)
    except OSError as err:
        raise SeqsketchError(f"cannot listen on {args.host}:{args.port}: {err.strerror or err}",
                             where="--port") from None
    stop = threading.Event()

    def supervise() -> None:
        while not stop.wait(1.0):
            runner.check()

    threading.Thread(target=supervise, name="seqsketch-runner-watch", daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    _announce(args, server.server_port, "werkzeug development server, one process", runner)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        server.server_close()
    return 0


def _serve_gunicorn(args: argparse.Namespace, runner: RunnerProcess, listener: Any) -> int:
    from gunicorn.app.base import BaseApplication
    from gunicorn.arbiter import Arbiter

    from api.state import default_config
    from api.streaming import StreamSlots

    port = listener.getsockname()[1]
    fd = listener.detach()  # the master takes over the socket bound above
    config = default_config()
    # the open streams are counted in memory the forked workers share: the limits hold per server
    slots = StreamSlots(int(config["MAX_STREAMS"]), int(config["MAX_STREAMS_PER_TOKEN"]), shared=True)
    if args.workers > 1:
        # the workers share the cores between requests already: a query's windows stay on its worker's
        # thread unless the operator says otherwise (the forked workers inherit this)
        os.environ.setdefault("SEQSKETCH_QUERY_THREADS", "1")

    class SupervisingArbiter(Arbiter):
        """gunicorn's master, which also keeps the job runner alive (checked once a loop, about 1 s)."""

        def manage_workers(self) -> None:
            super().manage_workers()
            runner.check()

    class Service(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            settings = {
                "workers": args.workers, "threads": args.threads,
                "worker_class": "api.server.worker.AsyncWorker",
                "timeout": args.timeout, "graceful_timeout": args.graceful_timeout,
                "keepalive": args.keep_alive, "bind": [f"fd://{fd}"],
                "proc_name": "seqsketch", "errorlog": "-", "loglevel": "warning",
                "control_socket_disable": True,
                "when_ready": lambda _arbiter: _announce(
                    args, port, f"gunicorn, {args.workers} worker(s) x {args.threads} thread(s)", runner),
                "on_exit": lambda _arbiter: runner.stop(),
            }
            for key, value in settings.items():
                if key in self.cfg.settings:
                    self.cfg.set(key, value)

        def load(self) -> Any:
            from api.app import create_app

            return create_app({"JOB_RUNNER": "external", "STREAM_SLOTS": slots})

        def run(self) -> None:
            SupervisingArbiter(self).run()

    try:
        Service().run()
    except SystemExit as stop:
        return int(stop.code or 0)
    return 0

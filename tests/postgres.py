"""A throwaway PostgreSQL cluster for the tests that use a real catalog database: started on a Unix socket
when the server binaries and psycopg are present (as the ``postgres`` user when the tests run as root)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for root in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (root / name).exists():
            return str(root / name)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL cluster on a Unix socket, when the server binaries and psycopg are present."""
    pytest.importorskip("psycopg")
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("PostgreSQL server binaries not installed")
    prefix: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        runuser = shutil.which("runuser")
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            runuser = None
        if not runuser:
            pytest.skip("running as root without a postgres user to run the server as")
        prefix = [runuser, "-u", "postgres", "--"]
    base = Path(tempfile.mkdtemp(prefix="seqsketch-pg-"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    if prefix:
        shutil.chown(base, "postgres")
        shutil.chown(sock, "postgres")
    port = _free_port()
    try:
        subprocess.run([*prefix, initdb, "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"],
                       check=True, capture_output=True, timeout=120)
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-w", "-l", str(base / "log"), "-o",
                        f"-p {port} -k {sock} -c listen_addresses='' -c fsync=off", "start"],
                       check=True, capture_output=True, timeout=120)
    except (subprocess.SubprocessError, OSError) as err:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"could not start PostgreSQL: {err}")
    try:
        yield f"postgresql+psycopg://postgres@/postgres?host={sock}&port={port}"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True,
                       timeout=60)
        shutil.rmtree(base, ignore_errors=True)



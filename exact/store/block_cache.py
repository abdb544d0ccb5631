"""The local cache of blocks fetched from object storage: fixed-size blocks of immutable objects on local
disk, bounded (:data:`DEFAULT_CACHE_BYTES`, ``SEQSKETCH_CACHE_BYTES``), the blocks used longest ago evicted
first.  A block file carries its length and CRC-32 and is written under a temporary name then renamed: a
block that is partly written, truncated or damaged on disk fails its check, is deleted and fetched again —
never used."""

from __future__ import annotations

import hashlib
import os
import struct
import threading
import uuid
import zlib
from collections import OrderedDict
from pathlib import Path

from exact.errors import InputError

#: the bytes a fetch brings at least (an aligned block of the object)
BLOCK_BYTES = 1 << 20
#: the default bound of a server's cache of fetched blocks
DEFAULT_CACHE_BYTES = 2 << 30

_MAGIC = b"SQBLK1\0\0"
_HEAD = struct.Struct("<8sQQI")  # magic, block number, length, CRC-32


class BlockCache:
    """Fixed-size blocks of immutable objects, kept in files under ``folder`` up to ``max_bytes`` (the least
    recently used evicted first); each block file checked (length, CRC-32) whenever it is read."""

    def __init__(self, folder: Path, max_bytes: int = DEFAULT_CACHE_BYTES, block_bytes: int = BLOCK_BYTES) -> None:
        if max_bytes < block_bytes:
            raise InputError(f"a cache of {max_bytes} bytes cannot hold one block of {block_bytes}",
                             where="SEQSKETCH_CACHE_BYTES")
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self.block_bytes = block_bytes
        self._lock = threading.Lock()
        self._held: OrderedDict[str, int] | None = None  # block file name -> bytes on disk, least recent first
        self._bytes = 0
        self.corrupt = 0  # block files found damaged (deleted, fetched again)

    @classmethod
    def from_env(cls, home: Path) -> BlockCache:
        """The cache of a seqsketch home: ``home/cache/objects``, bounded by ``SEQSKETCH_CACHE_BYTES``."""
        raw = os.environ.get("SEQSKETCH_CACHE_BYTES")
        try:
            size = DEFAULT_CACHE_BYTES if raw is None else int(raw)
        except ValueError:
            raise InputError(f"SEQSKETCH_CACHE_BYTES must be a number of bytes, not {raw!r}",
                             where="SEQSKETCH_CACHE_BYTES") from None
        return cls(home / "cache" / "objects", size, BLOCK_BYTES)

    def _scan(self) -> OrderedDict[str, int]:
        if self._held is None:
            found: list[tuple[float, str, int]] = []
            if self.folder.is_dir():
                for sub in self.folder.iterdir():
                    for f in sub.iterdir() if sub.is_dir() else ():
                        if f.name.endswith(".blk"):
                            st = f.stat()
                            found.append((st.st_atime, f"{sub.name}/{f.name}", st.st_size))
                        elif ".tmp-" in f.name:
                            f.unlink(missing_ok=True)  # (a write that died)
            self._held = OrderedDict((name, size) for _, name, size in sorted(found))
            self._bytes = sum(self._held.values())
        return self._held

    @staticmethod
    def name(path: str, size: int, block: int) -> str:
        digest = hashlib.sha256(f"{path}\0{size}\0{block}".encode()).hexdigest()
        return f"{digest[:2]}/{digest[2:40]}.blk"

    def get(self, name: str, block: int) -> bytes | None:
        """The block's bytes if held and whole; a damaged block file is deleted (None)."""
        with self._lock:
            held = self._scan()
            if name not in held:
                return None
            held.move_to_end(name)
        path = self.folder / name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self._forget(name)
            return None
        if len(data) >= _HEAD.size:
            magic, number, length, crc = _HEAD.unpack_from(data)
            payload = data[_HEAD.size:]
            if magic == _MAGIC and number == block and length == len(payload) and zlib.crc32(payload) == crc:
                return payload
        self.corrupt += 1
        path.unlink(missing_ok=True)
        self._forget(name)
        return None

    def put(self, name: str, block: int, payload: bytes) -> None:
        """Keep a fetched block: written aside and renamed into place, then older blocks evicted to stay
        within the bound."""
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f"{path.name}.tmp-{uuid.uuid4().hex[:8]}"
        data = _HEAD.pack(_MAGIC, block, len(payload), zlib.crc32(payload)) + payload
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
            return  # (a full or read-only disk: the block is answered, only not kept)
        gone: list[str] = []
        with self._lock:
            held = self._scan()
            self._bytes += len(data) - held.pop(name, 0)
            held[name] = len(data)
            while self._bytes > self.max_bytes and len(held) > 1:
                old, size = held.popitem(last=False)
                self._bytes -= size
                gone.append(old)
        for old in gone:
            (self.folder / old).unlink(missing_ok=True)

    def _forget(self, name: str) -> None:
        with self._lock:
            held = self._scan()
            self._bytes -= held.pop(name, 0)

    @property
    def bytes_held(self) -> int:
        with self._lock:
            self._scan()
            return self._bytes

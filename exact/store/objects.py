"""Object storage: a store root that is a bucket prefix (``s3://bucket/prefix``), read by byte ranges through a
bounded local cache.

An :class:`ObjectStore` names a prefix of a bucket on an S3-compatible service, reached through pyarrow's S3
filesystem with the usual environment: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION`` (or
``AWS_DEFAULT_REGION``; default ``us-east-1``) and ``AWS_ENDPOINT_URL`` for a service other than AWS.  Every
file a store writes is immutable once written and named uniquely (parts, seek files, trees, layouts), so what
a server fetched of one stays true: reads go through a :class:`BlockCache` of fixed-size blocks on local disk.

The cache (:mod:`exact.store.block_cache`) is bounded and keeps each block checked.
:func:`fetch_counts` tells how many bytes were fetched and how many block reads the cache
answered, per thread, for a query's ``stats``.

Object storage has no rename: what a commit needs instead is :meth:`ObjectStore.put_if_absent`, a
conditional put (``If-None-Match: *``, which AWS S3 and SeaweedFS honour) of which exactly one of any number
of racing writers wins.

A service that cannot be reached is :class:`~exact.errors.StorageUnavailable` (HTTP 503), naming the
location, after a short connect timeout and a few retries — not a hang, and not a damaged store.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from exact.errors import InputError, NotFound, StorageUnavailable
from exact.store.block_cache import BlockCache

#: the scheme of an object-store location
SCHEME = "s3"
#: blocks of one read fetched at once
RANGE_THREADS = 8



def is_object_uri(root: str | os.PathLike[str]) -> bool:
    """Whether a store root names object storage (``s3://…``) rather than a local folder."""
    return str(root).startswith(f"{SCHEME}://")


@dataclass(frozen=True)
class ObjectLocation:
    """A bucket and a key prefix (no leading or trailing slash; may be empty)."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, uri: str) -> ObjectLocation:
        """``s3://bucket[/prefix]``; anything else is an :class:`~exact.errors.InputError` naming it."""
        parts = urlsplit(uri)
        if parts.scheme != SCHEME or not parts.netloc or parts.query or parts.fragment:
            raise InputError(f"not an object-store location: {uri!r}; expected s3://bucket/prefix", where=uri)
        bucket = parts.netloc
        if not (3 <= len(bucket) <= 63) or not all(c.isalnum() or c in "-." for c in bucket) \
                or not bucket[0].isalnum():
            raise InputError(f"{bucket!r} is not a bucket name (3-63 letters, digits, '-' and '.')", where=uri)
        prefix = parts.path.strip("/")
        if any(p in ("", ".", "..") for p in prefix.split("/")) and prefix:
            raise InputError(f"the prefix {prefix!r} has an empty, '.' or '..' segment", where=uri)
        return cls(bucket, prefix)

    @property
    def uri(self) -> str:
        return f"{SCHEME}://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")

    def path(self, key: str) -> str:
        """The filesystem path (``bucket/prefix/key``) of ``key`` under this location."""
        return "/".join(p for p in (self.bucket, self.prefix, key.strip("/")) if p)

    def child(self, key: str) -> ObjectLocation:
        return ObjectLocation(self.bucket, "/".join(p for p in (self.prefix, key.strip("/")) if p))


def s3_filesystem(*, create_buckets: bool = False) -> Any:
    """pyarrow's S3 filesystem configured from the environment (see the module docstring), with short
    timeouts so that an unreachable service is reported, not waited for."""
    from pyarrow import fs

    endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL_S3")
    options: dict[str, Any] = {
        "region": os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        "connect_timeout": float(os.environ.get("SEQSKETCH_S3_CONNECT_TIMEOUT", "2")),
        "request_timeout": float(os.environ.get("SEQSKETCH_S3_REQUEST_TIMEOUT", "30")),
        "retry_strategy": fs.AwsStandardS3RetryStrategy(max_attempts=3),
        "allow_bucket_creation": create_buckets,
    }
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
        options["endpoint_override"] = parts.netloc
        options["scheme"] = parts.scheme or "http"
    return fs.S3FileSystem(**options)


class _Counts(threading.local):
    def __init__(self) -> None:
        self.fetched_bytes = 0
        self.fetches = 0
        self.cache_hits = 0


_COUNTS = _Counts()


def count_fetched(fetched_bytes: int, fetches: int) -> None:
    """Count, for this thread, what it had fetched on its behalf by other threads."""
    _COUNTS.fetched_bytes += fetched_bytes
    _COUNTS.fetches += fetches


@contextmanager
def fetch_counts() -> Iterator[dict[str, int]]:
    """Count this thread's fetches within the block: ``fetched_bytes``, ``fetches`` (ranged GETs) and
    ``cache_hits`` (block reads the local cache answered), in the dict yielded (filled in as it ends)."""
    before = (_COUNTS.fetched_bytes, _COUNTS.fetches, _COUNTS.cache_hits)
    out: dict[str, int] = {}
    try:
        yield out
    finally:
        out.update(fetched_bytes=_COUNTS.fetched_bytes - before[0], fetches=_COUNTS.fetches - before[1],
                   cache_hits=_COUNTS.cache_hits - before[2])


class ObjectStore:
    """A location on object storage: whole objects written and read, immutable ones read by ranges through
    ``cache`` (None: every read fetches)."""

    def __init__(self, location: ObjectLocation | str, cache: BlockCache | None = None, *,
                 filesystem: Any = None, create_bucket: bool = False) -> None:
        self.location = location if isinstance(location, ObjectLocation) else ObjectLocation.parse(location)
        self.cache = cache
        self.fs = filesystem if filesystem is not None else s3_filesystem(create_buckets=create_bucket)
        self._sizes: dict[str, int] = {}
        if create_bucket:
            self._call(lambda: self.fs.create_dir(self.location.bucket, recursive=False), "")

    @property
    def uri(self) -> str:
        return self.location.uri

    def _call(self, action: Any, key: str) -> Any:
        """``action()``, with a service that cannot be reached reported as such and a missing object as
        :class:`~exact.errors.NotFound`."""
        where = f"{self.location.uri}/{key}" if key else self.location.uri
        try:
            return action()
        except FileNotFoundError:
            raise NotFound(f"no object {key!r} in {self.location.uri}", where=where) from None
        except OSError as err:
            text = str(err)
            if "NoSuchKey" in text or "Path does not exist" in text or "does not exist" in text.lower():
                raise NotFound(f"no object {key!r} in {self.location.uri}", where=where) from None
            raise StorageUnavailable(f"the object store at {self.location.uri} could not be reached or "
                                     f"refused the request: {_first_line(text)}", where=where) from None

    # --- writing ----------------------------------------------------------------------------------------------
    def put(self, key: str, data: bytes) -> None:
        """Write object ``key`` whole (visible once the upload completes: an object store never shows half of
        one)."""

        def write() -> None:
            with self.fs.open_output_stream(self.location.path(key)) as out:
                out.write(data)

        self._call(write, key)
        self._sizes[key] = len(data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Write object ``key`` only if no object of that name exists (a conditional put, ``If-None-Match:
        *``): True if this write made it, False if one existed or a concurrent one won.  Of any number of
        writers racing to one name exactly one gets True — the primitive a commit needs where there is no
        rename (the commit log's next version: :mod:`exact.store.manifest`)."""
        status, body = _signed_put(self.location, key, data, {"If-None-Match": "*"})
        if status in (200, 201):
            self._sizes[key] = len(data)
            return True
        if status in (409, 412):  # (412: it exists; 409: a concurrent conditional write to it is under way)
            return False
        raise StorageUnavailable(f"the object store at {self.location.uri} refused a write of {key!r}: HTTP "
                                 f"{status} {_first_line(body.decode('utf-8', 'replace'))}",
                                 where=f"{self.location.uri}/{key}")

    def delete(self, key: str) -> None:
        self._sizes.pop(key, None)
        try:
            self._call(lambda: self.fs.delete_file(self.location.path(key)), key)
        except NotFound:
            pass

    # --- reading ----------------------------------------------------------------------------------------------
    def size(self, key: str) -> int:
        """The object's size (asked once per object: objects never change)."""
        size = self._sizes.get(key)
        if size is None:
            info = self._call(lambda: self.fs.get_file_info(self.location.path(key)), key)
            from pyarrow import fs

            if info.type != fs.FileType.File:
                raise NotFound(f"no object {key!r} in {self.location.uri}", where=f"{self.location.uri}/{key}")
            size = self._sizes[key] = int(info.size)
        return size

    def exists(self, key: str) -> bool:
        try:
            self.size(key)
        except NotFound:
            return False
        return True

    def list(self, folder: str = "") -> list[str]:
        """The keys under ``folder`` (relative to the location), sorted."""
        from pyarrow import fs

        base = self.location.path(folder)
        selector = fs.FileSelector(base, allow_not_found=True, recursive=True)
        infos = self._call(lambda: self.fs.get_file_info(selector), folder)
        start = len(self.location.path("")) + 1 if self.location.prefix else len(self.location.bucket) + 1
        return sorted(i.path[start:] for i in infos if i.type == fs.FileType.File)

    def get(self, key: str) -> bytes:
        """Object ``key`` whole, fetched now (not cached: for objects that may be replaced)."""

        def read() -> bytes:
            with self.fs.open_input_stream(self.location.path(key)) as f:
                return bytes(f.read())

        data: bytes = self._call(read, key)
        _COUNTS.fetched_bytes += len(data)
        _COUNTS.fetches += 1
        return data

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        """``length`` bytes of immutable object ``key`` from ``offset`` (fewer at its end), a block at a time
        through the cache."""
        size = self.size(key)
        if offset < 0 or length < 0:
            raise ValueError(f"a range of {length} bytes at {offset}")
        end = min(size, offset + length)
        if offset >= end:
            return b""
        if self.cache is None:
            return self._fetch(key, offset, end - offset)
        step = self.cache.block_bytes
        path = self.location.path(key)
        blocks = range(offset // step, (end - 1) // step + 1)
        found: dict[int, bytes] = {}
        missing = []
        for block in blocks:
            data = self.cache.get(self.cache.name(path, size, block), block)
            if data is None:
                missing.append(block)
            else:
                _COUNTS.cache_hits += 1
                found[block] = data

        def fetch(block: int) -> tuple[int, bytes]:
            data = self.fetch_uncounted(key, block * step, min(step, size - block * step))
            self.cache.put(self.cache.name(path, size, block), block, data)  # type: ignore[union-attr]
            return block, data

        if len(missing) > 1:  # (several blocks at once: one stream from an object store moves far less)
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=min(RANGE_THREADS, len(missing))) as pool:
                found.update(pool.map(fetch, missing))
        else:
            found.update(map(fetch, missing))
        _COUNTS.fetched_bytes += sum(len(found[b]) for b in missing)
        _COUNTS.fetches += len(missing)
        pieces = []
        for block in blocks:
            data = found[block]
            lo = max(offset - block * step, 0)
            hi = min(end - block * step, len(data))
            pieces.append(data[lo:hi])
        return b"".join(pieces)

    def fetch(self, key: str, offset: int, length: int) -> bytes:
        """``length`` bytes of object ``key`` from ``offset``, fetched now (one ranged GET, not cached)."""
        return self._fetch(key, offset, length)

    def _fetch(self, key: str, offset: int, length: int) -> bytes:
        data = self.fetch_uncounted(key, offset, length)
        _COUNTS.fetched_bytes += len(data)
        _COUNTS.fetches += 1
        return data

    def fetch_uncounted(self, key: str, offset: int, length: int) -> bytes:
        """One ranged GET, not counted (a caller on several threads counts for the thread it serves)."""

        def read() -> bytes:
            with self.fs.open_input_file(self.location.path(key)) as f:
                return bytes(f.read_at(length, offset))

        data: bytes = self._call(read, key)
        return data

    def open(self, key: str) -> RangedFile:
        """A read-only file object over immutable object ``key`` (for Parquet readers), reading by ranges."""
        return RangedFile(self, key)


class RangedFile:
    """A seekable, read-only file over an object, each read a range (:meth:`ObjectStore.read_range`)."""

    def __init__(self, store: ObjectStore, key: str) -> None:
        self.store, self.key = store, key
        self._size = store.size(key)
        self._at = 0
        self.closed = False

    def size(self) -> int:
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._at

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._at, os.SEEK_END: self._size}[whence]
        self._at = max(0, base + offset)
        return self._at

    def read(self, n: int = -1) -> bytes:
        n = self._size - self._at if n is None or n < 0 else n
        data = self.store.read_range(self.key, self._at, n)
        self._at += len(data)
        return data

    def read_at(self, offset: int, n: int) -> bytes:
        return self.store.read_range(self.key, offset, n)

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> RangedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _signed_put(location: ObjectLocation, key: str, data: bytes, extra: dict[str, str]) -> tuple[int, bytes]:
    """One PUT of ``data`` to ``key`` with the headers ``extra``, signed with AWS Signature Version 4 from the
    environment's credentials (pyarrow's S3 filesystem has no conditional write); its status and body."""
    import datetime as dt
    import hmac
    import http.client
    from urllib.parse import quote

    access = os.environ.get("AWS_ACCESS_KEY_ID")
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not access or not secret:
        raise StorageUnavailable("a commit to object storage needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                                 "in the environment", where=location.uri)
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL_S3")
    object_path = "/".join(quote(p, safe="-_.~") for p in location.path(key).split("/")[1:])
    if endpoint:  # (path style: the bucket in the path, as S3-compatible services expect)
        parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
        scheme, host = parts.scheme or "http", parts.netloc
        target = f"/{quote(location.bucket, safe='-_.~')}/{object_path}"
    else:  # (AWS: virtual-hosted style)
        scheme, host = "https", f"{location.bucket}.s3.{region}.amazonaws.com"
        target = f"/{object_path}"
    now = dt.datetime.now(dt.UTC)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    headers = {"host": host, "x-amz-date": stamp, "x-amz-content-sha256": hashlib.sha256(data).hexdigest(),
               **{k.lower(): v for k, v in extra.items()}}
    token = os.environ.get("AWS_SESSION_TOKEN")
    if token:
        headers["x-amz-security-token"] = token
    names = sorted(headers)
    canonical = "\n".join(["PUT", target, "", "".join(f"{n}:{headers[n].strip()}\n" for n in names),
                           ";".join(names), headers["x-amz-content-sha256"]])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    signing = f"AWS4{secret}".encode()
    for piece in (day, region, "s3", "aws4_request"):
        signing = hmac.new(signing, piece.encode(), hashlib.sha256).digest()
    signature = hmac.new(signing, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={access}/{scope}, SignedHeaders={';'.join(names)}, "
                                f"Signature={signature}")
    kind = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    timeout = float(os.environ.get("SEQSKETCH_S3_REQUEST_TIMEOUT", "30"))
    conn = kind(host, timeout=timeout)
    try:
        conn.request("PUT", target, body=data, headers={k: v for k, v in headers.items() if k != "host"})
        response = conn.getresponse()
        return response.status, response.read()
    except OSError as err:
        raise StorageUnavailable(f"the object store at {location.uri} could not be reached: {err}",
                                 where=f"{location.uri}/{key}") from None
    finally:
        conn.close()


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:300] if text.strip() else "no reason given"

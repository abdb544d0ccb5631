"""Where an input's bytes come from: a local file, or an object on object storage (``s3://bucket/key``).

A split reader (a Spark task reading its piece of a large input) opens the input here and seeks to its
piece: an object is read by ranges through pyarrow's S3 filesystem (:func:`exact.store.objects.s3_filesystem`,
configured from the environment), never fetched whole.  A reader that wants a local path (XES, archives, the
in-process build) gets the object fetched once into a folder of the caller's (:func:`local_copy`).
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import threading
import uuid
from pathlib import Path
from typing import IO, Any

from exact.errors import InputError, NotFound, StorageUnavailable
from exact.store.objects import ObjectLocation, is_object_uri

#: the bytes a buffered read of an object asks for at once
READ_BUFFER = 1 << 20

_FS: list[Any] = []
_FS_LOCK = threading.Lock()


def is_remote(spec: str | os.PathLike[str]) -> bool:
    """Whether an input names an object (``s3://…``) rather than a local file."""
    return is_object_uri(str(spec))


def _filesystem() -> Any:
    from exact.store.objects import s3_filesystem

    with _FS_LOCK:
        if not _FS:
            _FS.append(s3_filesystem())
        return _FS[0]


def _object_path(spec: str) -> str:
    loc = ObjectLocation.parse(spec)
    if not loc.prefix:
        raise InputError("an input on object storage names an object, s3://bucket/key", where=spec)
    return loc.path("")


def _info(spec: str) -> Any:
    from pyarrow import fs

    try:
        info = _filesystem().get_file_info(_object_path(spec))
    except OSError as err:
        raise StorageUnavailable(f"the object store could not be reached for {spec}: {err}", where=spec) from None
    if info.type != fs.FileType.File:
        raise InputError("no such object", where=spec)
    return info


def source_exists(spec: str | os.PathLike[str]) -> bool:
    """Whether the input exists (a file, or an object)."""
    if not is_remote(spec):
        return Path(spec).is_file()
    try:
        _info(str(spec))
    except InputError:
        return False
    return True


def source_size(spec: str | os.PathLike[str]) -> int:
    """The input's size in bytes."""
    if not is_remote(spec):
        return Path(spec).stat().st_size
    return int(_info(str(spec)).size)


def open_source(spec: str | os.PathLike[str]) -> IO[bytes]:
    """The input opened for reading, seekable (an object read by ranges, a megabyte at a time)."""
    if not is_remote(spec):
        return open(spec, "rb")  # noqa: SIM115 - handed to the caller
    try:
        raw = _filesystem().open_input_file(_object_path(str(spec)))
    except FileNotFoundError:
        raise InputError("no such object", where=str(spec)) from None
    except OSError as err:
        raise StorageUnavailable(f"the object store could not be reached for {spec}: {err}",
                                 where=str(spec)) from None
    return io.BufferedReader(raw, READ_BUFFER)


def parquet_source(spec: str | os.PathLike[str]) -> Any:
    """What :class:`pyarrow.parquet.ParquetFile` opens: the path, or the object opened by ranges."""
    if not is_remote(spec):
        return spec
    try:
        return _filesystem().open_input_file(_object_path(str(spec)))
    except FileNotFoundError:
        raise InputError("no such object", where=str(spec)) from None
    except OSError as err:
        raise StorageUnavailable(f"the object store could not be reached for {spec}: {err}",
                                 where=str(spec)) from None


def local_copy(spec: str | os.PathLike[str], folder: Path) -> Path:
    """A local path holding the input: a local file as it is; an object fetched once into ``folder`` (named
    by its location, size and modification time, written aside then renamed, so a copy is whole or absent)."""
    if not is_remote(spec):
        return Path(spec)
    spec = str(spec)
    info = _info(spec)
    key = hashlib.sha256(f"{spec}\0{info.size}\0{info.mtime_ns}".encode()).hexdigest()[:16]
    target = folder / key / Path(_object_path(spec)).name
    if target.is_file() and target.stat().st_size == info.size:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open_source(spec) as src, open(tmp, "wb") as out:
            shutil.copyfileobj(src, out, READ_BUFFER)
        os.replace(tmp, target)
    except NotFound as err:
        raise InputError("no such object", where=spec) from err
    finally:
        tmp.unlink(missing_ok=True)
    return target

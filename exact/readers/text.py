"""The text reader: every whitespace-separated token is one event, its position its time.

Token ``i`` (0-based, over the whole input) is at ``1970-01-01T00:00:00Z + i`` seconds, plus an optional
origin so several text inputs continue one another; a ``word/tag`` token keeps the word.  A ``.zip``
archive is read member by member in name order, skipping directories and the documentation members corpus
archives carry; a ``.gz`` file is decompressed.
"""


from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np
import pyarrow as pa

from exact.errors import InputError
from exact.events import make_table
from exact.readers.common import READ_ERRORS, ReadOptions, no_events, open_binary, unreadable

_DOC_MEMBER = re.compile(r"^(readme|license|licence|contents)([._-].*)?$|^cats\.txt$", re.IGNORECASE)


def word_of(token: str) -> str:
    """The word of a ``word/tag`` token (the part before the last ``/``); other tokens stay whole."""
    head, sep, _ = token.rpartition("/")
    return head if sep and head else token


def read_text(path: Path, options: ReadOptions) -> Iterator[pa.Table]:
    """Whitespace tokens as events (see module docstring for ts and ``.zip`` handling)."""
    position = options.text_origin
    for where, stream in _text_streams(path):
        with stream:
            batch: list[str] = []
            try:
                # utf-8-sig: a byte-order mark opening a file is not part of its first word.
                for line in io.TextIOWrapper(stream, encoding="utf-8-sig"):
                    batch.extend(word_of(tok) for tok in line.split())
                    if len(batch) >= options.batch_rows:
                        yield _text_table(batch, position)
                        position += len(batch)
                        batch = []
            except UnicodeDecodeError as err:
                raise InputError(f"not UTF-8 text (byte {err.start} of a block): {err.reason}",
                                 where=where) from None
            except READ_ERRORS as err:
                raise unreadable(err, where) from None
            if batch:
                yield _text_table(batch, position)
                position += len(batch)
    if position == options.text_origin:
        raise no_events(str(path))


def _text_streams(path: Path) -> Iterator[tuple[str, IO[bytes]]]:
    if zipfile.is_zipfile(path):
        try:
            archive = zipfile.ZipFile(path)
        except zipfile.BadZipFile as err:
            raise InputError(f"bad zip archive: {err}", where=str(path)) from None
        with archive:
            for info in sorted(archive.infolist(), key=lambda i: i.filename):
                base = info.filename.rstrip("/").rsplit("/", 1)[-1]
                if info.is_dir() or _DOC_MEMBER.match(base) or base.startswith("."):
                    continue
                yield f"{path}:{info.filename}", archive.open(info)
    else:
        yield str(path), open_binary(path)


def _text_table(words: list[str], position: int) -> pa.Table:
    ts = np.arange(position, position + len(words), dtype=np.int64) * 1_000_000
    return make_table(pa.array(ts), pa.array(words, pa.string()))

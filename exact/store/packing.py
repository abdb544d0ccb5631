"""Integer columns bit-packed in blocks, read in place: a slice or a gather decodes only the blocks it touches.

A column of ``n`` integers is cut into blocks of :data:`BLOCK` values.  Each block keeps a *reference* and a bit
*width*, and its values as ``width``-bit numbers packed into 64-bit words (little-endian, value ``i`` of the
block at bit ``i * width`` of the block's words):

- **frame of reference** (``delta=False``): a value is ``reference + packed`` — the block's smallest value and
  what each lies above it.  A small-range column (type codes, value codes, time steps within a block) takes
  the bits of its range, not of its type.
- **delta** (``delta=True``): for columns that mostly increase — a part's rows grouped by type, a value
  index's rows by type and bucket: sorted runs of row numbers.  A value is the block's first value plus the
  sum of the steps up to it, each step stored as ``packed + low`` (``low``: the block's smallest step, negative
  where a run ends and the next begins).  Rows of a type that makes a fifth of a part take 3–4 bits instead of
  32.

All arithmetic is on 64-bit words modulo 2**64, so any int64 column packs, its extremes included (the widest
block takes 64 bits).  Delta steps are taken modulo 2**64 as well, then as signed: a delta column's steps must
fit in int64, which row numbers always do.

The layout a seek file holds (:func:`to_bytes`, :func:`from_buffer`): a header of ``n``, the block size, the
flags, the value dtype and the blocks, then per block its reference (and, delta, its smallest step), the
words, and per block its width — the words' offsets follow from the widths.  Placed at an 8-byte boundary, a
mapped file is read without copying.  Decoding is compiled (numba, cached on
disk) and touches only the blocks asked for.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

#: values per block: the unit a slice or a gather decodes (a gather of one value in a delta block sums the
#: steps before it)
BLOCK = 256

_HEAD = struct.Struct("<8sqiiii")  # magic, n, block, delta, dtype code, reserved
_MAGIC = b"SQPACK01"
_DTYPES = (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32), np.dtype(np.int64),
           np.dtype(np.uint64), np.dtype(np.int32))


class PackedFormatError(ValueError):
    """A packed column's bytes do not describe a column (truncated, or of another layout)."""


@dataclass(frozen=True, eq=False)
class Packed:
    """A bit-packed integer column (see the module docstring); indexing it decodes what is asked for."""

    n: int
    delta: bool
    dtype: np.dtype[Any]  # of the values handed out
    ref: np.ndarray  # uint64 per block: the first value (delta) or the smallest (frame of reference)
    low: np.ndarray  # uint64 per block: the smallest step, as two's complement (delta); 0 otherwise
    width: np.ndarray  # uint8 per block
    start: np.ndarray  # int64 per block and one more: where each block's words begin in ``words``
    words: np.ndarray  # uint64
    block: int = BLOCK

    def __len__(self) -> int:
        return self.n

    @property
    def shape(self) -> tuple[int]:
        return (self.n,)

    @property
    def size(self) -> int:
        return self.n

    @property
    def nbytes(self) -> int:
        """The bytes the packed form takes in a file (:func:`to_bytes`)."""
        return _HEAD.size + int(self.ref.nbytes + (self.low.nbytes if self.delta else 0) + self.width.nbytes
                                + self.words.nbytes)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            lo, hi, step = key.indices(self.n)
            if step != 1:
                return self.decode(0, self.n)[key]
            return self.decode(lo, max(lo, hi))
        if isinstance(key, (int, np.integer)):
            i = int(key)
            if i < 0:
                i += self.n
            if not 0 <= i < self.n:
                raise IndexError(f"index {key} is out of range for a column of {self.n}")
            return self.gather(np.asarray([i], dtype=np.int64))[0]
        positions = np.asarray(key)
        if positions.dtype == np.bool_:
            if positions.shape != (self.n,):
                raise IndexError("a boolean mask must have one entry per value")
            return self.gather(np.flatnonzero(positions))
        return self.gather(positions)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.decode(0, self.n)
        return out if dtype is None else out.astype(dtype)

    def decode(self, lo: int, hi: int) -> np.ndarray:
        """The values ``lo … hi - 1``, decoding only their blocks."""
        lo, hi = max(0, lo), min(self.n, hi)
        if hi <= lo:
            return np.zeros(0, dtype=self.dtype)
        out = np.empty(hi - lo, dtype=self.dtype)
        _kernels()[0](self.ref, self.low, self.width, self.start, self.words, self.delta, self.block, lo, hi, out)
        return out

    def gather(self, positions: np.ndarray) -> np.ndarray:
        """The values at ``positions`` (any order, repeats allowed), decoding only the blocks they fall in."""
        pos = positions
        if not (isinstance(pos, np.ndarray) and pos.dtype == np.int64 and pos.ndim == 1):
            pos = np.asarray(positions, dtype=np.int64).reshape(-1)
        out = np.empty(len(pos), dtype=self.dtype)
        if len(pos):
            bad: int = _kernels()[1](self.ref, self.low, self.width, self.start, self.words, self.delta, self.block,
                                     self.n, np.ascontiguousarray(pos), out)
            if bad >= 0:
                raise IndexError(f"index {int(pos[bad])} is out of range for a column of {self.n}")
        shaped = np.asarray(positions)
        return out.reshape(shaped.shape) if shaped.ndim > 1 else out

    def decode_runs(self, lo: int, hi: int, runs: np.ndarray, per_run: int) -> np.ndarray:
        """The values ``lo … hi - 1`` less ``per_run`` times their run's number (int64), where run ``r`` holds
        the positions ``runs[r] … runs[r + 1] - 1``: a value index's rows keyed by cell
        (:class:`exact.store.value_index.ValueIndex`) back to row numbers, in one compiled pass."""
        lo, hi = max(0, lo), min(self.n, hi)
        out = np.empty(max(hi - lo, 0), dtype=np.uint64)
        if hi > lo:
            _kernels()[0](self.ref, self.low, self.width, self.start, self.words, self.delta, self.block, lo, hi, out)
            _kernels()[4](out, lo, np.ascontiguousarray(runs, dtype=np.int64), per_run)
        return out.view(np.int64)

    def searchsorted(self, lo: int, hi: int, values: np.ndarray, side: str = "left") -> np.ndarray:
        """Where ``values`` would go among the values ``lo … hi - 1`` (which must not decrease), as
        positions of the column (``lo`` … ``hi``), as :func:`numpy.searchsorted` finds them: found by the
        blocks' first values, then one block decoded per value — not the whole run."""
        if side not in ("left", "right"):
            raise ValueError(f"side is 'left' or 'right', not {side!r}")
        lo, hi = max(0, lo), min(self.n, hi)
        wanted = np.ascontiguousarray(values, dtype=np.int64)
        out = np.empty(len(wanted), dtype=np.int64)
        if hi <= lo:
            out[:] = lo
            return out
        _kernels()[5](self.ref, self.low, self.width, self.start, self.words, self.delta, self.block, self.n,
                      lo, hi, wanted.view(np.uint64), side == "right", self.dtype.kind == "i", out)
        if self.dtype.kind == "u":  # (a negative value lies before every unsigned one, not after as its bits do)
            out[wanted < 0] = lo
        return out

    def max(self) -> Any:
        """The largest value (decodes the column)."""
        return self.decode(0, self.n).max()


def pack(values: np.ndarray, *, delta: bool = False, block: int = BLOCK) -> Packed:
    """``values`` (a 1-d integer array) packed; decoded, it gives them back in their own dtype."""
    values = np.asarray(values)
    if values.ndim != 1 or values.dtype.kind not in "iu":
        raise ValueError(f"only 1-d integer columns pack, not {values.dtype} of shape {values.shape}")
    if values.dtype not in _DTYPES:
        raise ValueError(f"a packed column holds one of {', '.join(map(str, _DTYPES))}, not {values.dtype}")
    raw = values.astype(np.int64).view(np.uint64) if values.dtype != np.uint64 else values
    n = len(raw)
    blocks = -(-n // block)
    ref = np.zeros(blocks, dtype=np.uint64)
    low = np.zeros(blocks, dtype=np.uint64)
    width = np.zeros(blocks, dtype=np.uint8)
    start = np.zeros(blocks + 1, dtype=np.int64)
    _kernels()[2](np.ascontiguousarray(raw), delta, block, ref, low, width, start)
    words = np.zeros(int(start[-1]) + 1, dtype=np.uint64)  # (one spare word: a read may look one past)
    _kernels()[3](np.ascontiguousarray(raw), delta, block, ref, low, width, start, words)
    return Packed(n, delta, values.dtype, ref, low, width, start, words, block)


def to_bytes(column: Packed) -> bytes:
    """The column as a section of a file (see the module docstring): where each block's words begin is not
    written — it follows from the widths."""
    code = _DTYPES.index(column.dtype)
    head = _HEAD.pack(_MAGIC, column.n, column.block, int(column.delta), code, len(column.ref))
    parts = [head, column.ref.tobytes(), column.low.tobytes() if column.delta else b"", column.words.tobytes(),
             column.width.tobytes()]
    return b"".join(parts)


def _starts(width: np.ndarray, n: int, block: int) -> np.ndarray:
    """Where each block's words begin, from the blocks' widths (and one more: the words' end)."""
    counts = np.full(len(width), block, dtype=np.int64)
    if len(width):
        counts[-1] = n - block * (len(width) - 1)
    start = np.zeros(len(width) + 1, dtype=np.int64)
    np.cumsum((counts * width.astype(np.int64) + 63) // 64, out=start[1:])
    return start


def from_buffer(buffer: Any, offset: int = 0, length: int | None = None) -> Packed:
    """A column read in place from ``buffer`` (bytes or a memory map) at ``offset``; a damaged or foreign
    section is :class:`PackedFormatError`."""
    view = memoryview(buffer)
    end = len(view) if length is None else offset + length
    if end - offset < _HEAD.size:
        raise PackedFormatError("shorter than its header")
    magic, n, block, delta, code, blocks = _HEAD.unpack_from(view, offset)
    if magic != _MAGIC or not 0 <= code < len(_DTYPES) or block < 1 or n < 0 or blocks != -(-n // block):
        raise PackedFormatError("not a packed column")
    at = offset + _HEAD.size

    def take(dtype: Any, count: int) -> np.ndarray:
        nonlocal at
        size = np.dtype(dtype).itemsize * count
        if at + size > end:
            raise PackedFormatError("truncated")
        arr = np.frombuffer(view, dtype=dtype, count=count, offset=at)
        at += size
        return arr

    ref = take(np.uint64, blocks)
    low = take(np.uint64, blocks) if delta else np.zeros(blocks, dtype=np.uint64)
    # the widths follow the words: read them first, from the section's end
    if end - at < blocks:
        raise PackedFormatError("truncated")
    width = np.frombuffer(view, dtype=np.uint8, count=blocks, offset=end - blocks)
    if blocks and int(width.max()) > 64:
        raise PackedFormatError("a block wider than 64 bits")
    start = _starts(width, int(n), int(block))
    words = take(np.uint64, int(start[-1]) + 1)
    if at != end - blocks:
        raise PackedFormatError("its length does not match its blocks")
    return Packed(int(n), bool(delta), _DTYPES[code], ref, low, width, start, words, int(block))


# ------------------------------------------------------------------------------------------------- kernels
#
# The helpers ``_bits`` and ``search_one`` are compiled first (:func:`jitted`) and called by the kernels.


def _bits(words: Any, base: Any, w: Any, i: Any) -> Any:
    """Value ``i`` of a block whose ``w``-bit values begin at word ``base``: bits ``i*w … i*w + w - 1``."""
    if w == 0:
        return np.uint64(0)
    bit = i * w
    word = base + (bit >> 6)
    shift = np.uint64(bit & 63)
    packed = words[word] >> shift
    if shift != 0 and shift + np.uint64(w) > np.uint64(64):
        packed |= words[word + 1] << (np.uint64(64) - shift)
    if w < 64:
        packed &= (np.uint64(1) << np.uint64(w)) - np.uint64(1)
    return packed


def search_one(ref: Any, low: Any, width: Any, start: Any, words: Any, delta: bool, block: int, n: int, lo: int,
               hi: int, v: Any, right: bool, signed: bool) -> int:
    """Where ``v`` would go among the values ``lo … hi - 1`` (not decreasing), as :func:`numpy.searchsorted`
    with ``side="right"`` if ``right``: a frame-of-reference column by bisection (a value is read in place);
    a delta one by its blocks' first values, then one block decoded."""
    if not delta:
        a = lo
        z = hi
        while a < z:
            mid = (a + z) // 2
            b = mid // block
            x = ref[b] + _bits(words, start[b], np.int64(width[b]), mid - b * block)
            after = (np.int64(x) > np.int64(v) if right else np.int64(x) >= np.int64(v)) if signed else \
                (x > v if right else x >= v)
            if after:
                z = mid
            else:
                a = mid + 1
        return a
    first_inner = -(-lo // block)  # the first block that starts inside [lo, hi)
    last_inner = (hi - 1) // block
    # the last block starting inside the run whose first value lies before v (after, for right)
    a = first_inner
    z = last_inner + 1
    while a < z:
        mid = (a + z) // 2
        x = ref[mid] if delta else ref[mid] + _bits(words, start[mid], np.int64(width[mid]), 0)
        before = (np.int64(x) <= np.int64(v) if right else np.int64(x) < np.int64(v)) if signed else \
            (x <= v if right else x < v)
        if before:
            a = mid + 1
        else:
            z = mid
    b = a - 1  # the block to scan: b (from its start), or the block holding lo when none lies before
    if b < first_inner:
        b = lo // block
    begin = max(lo, b * block)
    end = min(hi, (b + 1) * block, n)
    w = np.int64(width[b])
    value = ref[b]
    for i in range(end - b * block):
        packed = _bits(words, start[b], w, i)
        if delta:
            if i > 0:
                value = value + packed + low[b]
        else:
            value = ref[b] + packed
        p = b * block + i
        if p < begin:
            continue
        after = (np.int64(value) > np.int64(v) if right else np.int64(value) >= np.int64(v)) if signed else \
            (value > v if right else value >= v)
        if after:
            return p
    return end


def _decode_range(ref: Any, low: Any, width: Any, start: Any, words: Any, delta: bool, block: int, lo: int,
                  hi: int, out: Any) -> None:
    for b in range(lo // block, (hi - 1) // block + 1):
        w = np.int64(width[b])
        begin = b * block
        a = max(lo, begin) - begin
        z = min(hi, begin + block) - begin
        value = ref[b]
        for i in range(0 if delta else a, z):
            packed = _bits(words, start[b], w, i)
            if delta:
                if i > 0:
                    value = value + packed + low[b]
                if i >= a:
                    out[begin + i - lo] = value
            else:
                out[begin + i - lo] = ref[b] + packed


def _gather(ref: Any, low: Any, width: Any, start: Any, words: Any, delta: bool, block: int, n: int, pos: Any,
            out: Any) -> int:
    """``out[k]``: the value at ``pos[k]`` (negative: from the end); returns -1, or the first ``k`` whose
    position lies outside the column (the rest then left unwritten)."""
    # blocks of a power of two (as written): a value's block by a shift, not a division
    shift = -1
    if block & (block - 1) == 0:
        shift = 0
        while (1 << shift) < block:
            shift += 1
    cached = -1
    scratch = np.empty(block if delta else 1, dtype=np.uint64)  # a delta block's values decoded so far
    filled = 0
    for k in range(len(pos)):
        p = pos[k]
        if p < 0:
            p += n
        if p < 0 or p >= n:
            return k
        if shift >= 0:
            b = p >> shift
            i = p & (block - 1)
        else:
            b = p // block
            i = p - b * block
        w = np.int64(width[b])
        if not delta:
            out[k] = ref[b] + _bits(words, start[b], w, i)
            continue
        if b != cached:
            cached = b
            scratch[0] = ref[b]
            filled = 1
        for j in range(filled, i + 1):
            scratch[j] = scratch[j - 1] + _bits(words, start[b], w, j) + low[b]
        filled = max(filled, i + 1)
        out[k] = scratch[i]
    return -1


def _unkey(values: Any, lo: int, runs: Any, per_run: int) -> None:
    """``values`` (positions ``lo …`` of a column, uint64) less ``per_run`` times their run's number, in place
    (see :meth:`Packed.decode_runs`)."""
    run = 0
    hi = len(runs) - 1
    while run < hi and runs[run + 1] <= lo:
        run += 1
    for i in range(len(values)):
        while run < hi and runs[run + 1] <= lo + i:
            run += 1
        values[i] = values[i] - np.uint64(run) * np.uint64(per_run)


def _search(ref: Any, low: Any, width: Any, start: Any, words: Any, delta: bool, block: int, n: int, lo: int,
            hi: int, values: Any, right: bool, signed: bool, out: Any) -> None:
    for k in range(len(values)):
        out[k] = search_one(ref, low, width, start, words, delta, block, n, lo, hi, values[k], right, signed)


def _measure(raw: Any, delta: bool, block: int, ref: Any, low: Any, width: Any, start: Any) -> None:
    n = len(raw)
    for b in range(len(ref)):
        begin = b * block
        end = min(n, begin + block)
        if delta:
            ref[b] = raw[begin]
            smallest = np.int64(0)
            largest = np.int64(0)
            for i in range(begin + 1, end):
                step = np.int64(raw[i] - raw[i - 1])
                if i == begin + 1 or step < smallest:
                    smallest = step
                if i == begin + 1 or step > largest:
                    largest = step
            low[b] = np.uint64(smallest)
            span = np.uint64(largest) - np.uint64(smallest)
        else:
            smallest_u = raw[begin]
            for i in range(begin, end):
                if np.int64(raw[i]) < np.int64(smallest_u):
                    smallest_u = raw[i]
            ref[b] = smallest_u
            span = np.uint64(0)
            for i in range(begin, end):
                d = raw[i] - smallest_u
                if d > span:
                    span = d
        w = 0
        while w < 64 and (span >> np.uint64(w)) != np.uint64(0):
            w += 1
        width[b] = w
        start[b + 1] = start[b] + (np.int64(end - begin) * w + 63) // 64


def _fill(raw: Any, delta: bool, block: int, ref: Any, low: Any, width: Any, start: Any, words: Any) -> None:
    n = len(raw)
    for b in range(len(ref)):
        begin = b * block
        end = min(n, begin + block)
        w = np.int64(width[b])
        if w == 0:
            continue
        for i in range(end - begin):
            if delta:
                v = np.uint64(0) if i == 0 else raw[begin + i] - raw[begin + i - 1] - low[b]
            else:
                v = raw[begin + i] - ref[b]
            bit = i * w
            word = start[b] + (bit >> 6)
            shift = np.uint64(bit & 63)
            words[word] |= v << shift
            if shift != 0 and shift + np.uint64(w) > np.uint64(64):
                words[word + 1] |= v >> (np.uint64(64) - shift)


#: held while the helpers are compiled: ``functools.cache`` does not keep two threads from calling a function
#: at once, and a helper compiled twice would be a compiled function handed to the compiler
_JIT_LOCK = threading.Lock()


def jitted() -> None:
    """Compile the helpers the kernels call (:func:`_bits`, :func:`search_one`) and put
    them in this module's namespace in place of the Python functions, where a kernel compiled afterwards
    finds them; call it before compiling such a kernel (any thread, any number of times: once done, done)."""
    import numba
    from numba.core.registry import CPUDispatcher

    with _JIT_LOCK:
        names = globals()
        for name in ("_bits", "search_one"):
            if not isinstance(names[name], CPUDispatcher):
                names[name] = numba.njit(cache=True, nogil=True, inline="always")(names[name])


def _kernels() -> tuple[Callable[..., Any], ...]:
    """The kernels compiled (cached on disk) on first use: importing this module loads no numba."""
    if _KERNELS:
        return _KERNELS[0]
    import numba

    jitted()
    with _JIT_LOCK:  # (one set of kernels, whichever thread asks first)
        if not _KERNELS:
            _KERNELS.append(tuple(numba.njit(cache=True, nogil=True)(f) for f in (
                _decode_range, _gather, _measure, _fill, _unkey, _search)))
    return _KERNELS[0]


_KERNELS: list[tuple[Callable[..., Any], ...]] = []


def warm_up() -> None:
    """Compile (or load from numba's on-disk cache) the kernels, so that no read or write waits for it."""
    column = pack(np.arange(3 * BLOCK, dtype=np.uint32), delta=True)
    column.decode(1, 2)
    column.gather(np.asarray([0], dtype=np.int64))
    column.searchsorted(0, len(column), np.asarray([5], dtype=np.int64))

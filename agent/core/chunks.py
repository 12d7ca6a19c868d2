"""Sealed chunks: one series' samples over a closed time span, stored as compressed columns.

A chunk holds the timestamps and one column per field name. Each column is encoded by what
its values are, then the whole chunk goes through zstd:

- integers (timestamps, counters): difference order 0, 1 or 2, whichever is smallest
  (delta-of-delta for regular timestamps, delta for counters), zigzag, then split into byte
  planes (all low bytes, then all second bytes, ...) so zstd sees long runs of equal bytes;
- floats written with few decimals (gauges at their source's precision, 12.5 %): the same
  integer path after scaling by 10**d, exact (a value that does not come back bit for bit
  is not taken this way);
- other floats: XOR with the previous value (Gorilla), in byte planes;
- anything else (strings, booleans, mixed types): JSON.

A field missing from some rows gets a presence byte per row. Decoding gives back every
value with its type, bit for bit.
"""

from __future__ import annotations

import json
import math
import struct
import threading
from array import array
from collections.abc import Collection, Iterator, Sequence
from functools import reduce
from itertools import accumulate, pairwise
from operator import xor
from typing import Any

import zstandard

_VERSION = 1
_HEADER = struct.Struct("<BII")  # version, rows, columns
_COLUMN = struct.Struct("<BBI")  # codec, has presence bytes, payload bytes
_INT, _DEC, _XOR, _JSON = 1, 2, 3, 4
_MAX_DECIMALS = 9
_LEVEL = 6
_tls = threading.local()


class ChunkError(Exception):
    """A chunk could not be decoded (damaged file or a bug): says what was wrong."""


def _zstd() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    pair = getattr(_tls, "zstd", None)
    if pair is None:  # the (de)compressors keep state: one per thread
        pair = _tls.zstd = (zstandard.ZstdCompressor(level=_LEVEL), zstandard.ZstdDecompressor())
    return pair


def _diff(values: list[int]) -> list[int]:
    return values[:1] + [b - a for a, b in pairwise(values)]


def _planes(words: list[int]) -> bytes:
    """Unsigned 64-bit words as byte planes, dropping high planes that are all zero."""
    width = max(w.bit_length() for w in words) + 7 >> 3 if words else 0
    raw = struct.pack(f"<{len(words)}Q", *words)
    return bytes([width]) + b"".join(raw[k::8] for k in range(width))


def _unplanes(data: bytes | memoryview, count: int) -> list[int]:
    width = data[0]
    if len(data) != 1 + width * count or width > 8:
        raise ChunkError(f"byte planes of {len(data)} bytes for {count} values of width {width}")
    raw = bytearray(8 * count)
    for k in range(width):
        raw[k::8] = data[1 + k * count:1 + (k + 1) * count]
    return list(struct.unpack(f"<{count}Q", raw))


def _encode_ints(values: list[int]) -> bytes | None:
    """Order byte + byte planes of the zigzagged differences; None if they do not fit 64 bits."""
    best: tuple[int, list[int]] | None = None
    seq = values
    for order in range(3):
        if order:
            seq = _diff(seq)
        cost = sum(abs(x).bit_length() for x in seq)
        if best is None or cost < best[0] - 8:  # a higher order must win clearly: it costs a decode pass
            best, chosen = (cost, seq), order
    assert best is not None
    zigzag = [(x << 1) ^ (x >> 63) for x in best[1]]
    if any(z >> 64 or z < 0 for z in zigzag):
        return None
    return bytes([chosen]) + _planes(zigzag)


def _decode_ints(data: bytes | memoryview, count: int) -> list[int]:
    order = data[0]
    seq = [(z >> 1) ^ -(z & 1) for z in _unplanes(data[1:], count)]
    for _ in range(order):
        seq = list(accumulate(seq))
    return seq


def _decimals(values: list[float]) -> int | None:
    """The fewest decimals that hold every value exactly, or None."""
    most = 0
    for v in values:
        text = repr(v)
        if "e" in text or "n" in text or (v == 0.0 and math.copysign(1.0, v) < 0):
            return None  # exponent, inf/nan or -0.0: not a short decimal
        d = len(text) - text.index(".") - 1
        if d > most:
            if d > _MAX_DECIMALS:
                return None
            most = d
    return 0 if most == 1 and all(v.is_integer() for v in values) else most


def _encode_column(values: list[Any]) -> tuple[int, bytes]:
    types = {type(v) for v in values}
    if types == {int}:
        payload = _encode_ints(values)
        if payload is not None:
            return _INT, payload
    elif types == {float}:
        d = _decimals(values)
        if d is not None:
            scale = 10**d
            scaled = [round(v * scale) for v in values]
            if all(s / scale == v for s, v in zip(scaled, values, strict=True)):
                payload = _encode_ints(scaled)
                if payload is not None:
                    return _DEC, bytes([d]) + payload
        words = struct.unpack(f"<{len(values)}Q", struct.pack(f"<{len(values)}d", *values))
        return _XOR, _planes([a ^ b for a, b in zip((0, *words), words, strict=False)])
    return _JSON, json.dumps(values, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _decode_column(codec: int, data: memoryview, count: int) -> list[Any]:
    if codec == _INT:
        return _decode_ints(data, count)
    if codec == _DEC:
        scale = 10 ** data[0]
        return [s / scale for s in _decode_ints(data[1:], count)]
    if codec == _XOR:
        words = list(accumulate(_unplanes(data, count), xor))
        return list(struct.unpack(f"<{count}d", struct.pack(f"<{count}Q", *words)))
    if codec == _JSON:
        values = json.loads(bytes(data))
        if not isinstance(values, list) or len(values) != count:
            raise ChunkError(f"JSON column of {len(values) if isinstance(values, list) else '?'} values, "
                             f"expected {count}")
        return values
    raise ChunkError(f"unknown column codec {codec}")


def encode(ts: Sequence[int], columns: Sequence[Sequence[Any]]) -> bytes:
    """A chunk of len(ts) rows; columns[i][row] is None where the row lacks that field."""
    n = len(ts)
    out = [_HEADER.pack(_VERSION, n, len(columns))]
    ts_payload = _encode_ints(list(ts))
    if ts_payload is None:
        raise ChunkError("timestamps do not fit 64 bits")
    out += [struct.pack("<I", len(ts_payload)), ts_payload]
    for col in columns:
        present = [v is not None for v in col]
        sparse = not all(present)
        codec, payload = _encode_column([v for v in col if v is not None] if sparse else list(col))
        out.append(_COLUMN.pack(codec, sparse, len(payload)))
        if sparse:
            out.append(bytes(present))
        out.append(payload)
    return _zstd()[0].compress(b"".join(out))


def _open(blob: bytes) -> tuple[memoryview, int, int]:
    """A chunk inflated, its format checked: (its bytes, rows, columns)."""
    data = memoryview(_zstd()[1].decompress(blob))
    version, n, ncols = _HEADER.unpack_from(data, 0)
    if version != _VERSION:
        raise ChunkError(f"chunk format {version}, this db2vtop reads {_VERSION}")
    return data, n, ncols


def timestamps(blob: bytes) -> Sequence[int]:
    """A chunk's timestamps alone (its first column): which rows it holds, without decoding their values. A
    chunk on a regular grid (nearly all: a source samples every 20 s) is a `range`, known from its first two
    differences: the second differences of the rest are zero bytes, seen without decoding them."""
    try:
        data, n, _ = _open(blob)
        (size,) = struct.unpack_from("<I", data, _HEADER.size)
        start = _HEADER.size + 4
        column = data[start:start + size]
        regular = _regular(column, n)
        return regular if regular is not None else _decode_ints(column, n)
    except ChunkError:
        raise
    except (zstandard.ZstdError, struct.error, ValueError, IndexError) as e:
        raise ChunkError(f"damaged chunk: {e}") from None


_REGULAR: dict[bytes, range | None] = {}  # `_regular`'s answers by the column's bytes (see there)


def _regular(column: memoryview, n: int) -> range | None:
    """The timestamps of a second-difference column whose differences past the second are all zero. Series
    sampled together (a vCenter's 10,000 VMs) have byte-identical timestamp columns in a span: the answer is kept
    by the column's bytes, and a reader of each one's chunk checks the zero bytes once, not 10,000 times."""
    if n < 3 or column[0] != 2:
        return None
    key = column.tobytes()
    found = _REGULAR.get(key, _REGULAR)  # (itself: not known yet; a None is an answer)
    if found is _REGULAR:
        if len(_REGULAR) >= 1024:
            _REGULAR.clear()
        found = _REGULAR[key] = _regular_of(column, n)
    return found


def _regular_of(column: memoryview, n: int) -> range | None:
    width = column[1]
    if len(column) != 2 + width * n or width > 8:
        return None
    planes = column[2:]
    if any(planes[k * n + 2:(k + 1) * n].tobytes().strip(b"\0") for k in range(width)):
        return None
    first, second = ((z >> 1) ^ -(z & 1) for z in (sum(planes[k * n + i] << (8 * k) for k in range(width))
                                                     for i in (0, 1)))
    step = first + second  # the first differences are [first, step, step, ...]
    return range(first, first + n * step, step) if step > 0 else None


def _int_at(data: bytes | memoryview, count: int, i: int) -> int:
    """Value i of an integer column without the others': its own bytes (no differences), or a prefix sum
    of the first i + 1 differences."""
    order, width = data[0], data[1]
    if len(data) != 2 + width * count or width > 8:
        raise ChunkError(f"byte planes of {len(data) - 1} bytes for {count} values of width {width}")
    if order == 0:
        z = sum(data[2 + k * count + i] << (8 * k) for k in range(width))
        return (z >> 1) ^ -(z & 1)
    raw = bytearray(8 * (i + 1))
    for k in range(width):
        raw[k::8] = data[2 + k * count:2 + k * count + i + 1]
    diffs = [(z >> 1) ^ -(z & 1) for z in struct.unpack(f"<{i + 1}Q", raw)]
    if order == 1:
        return sum(diffs)
    # second differences: value i = sum over m <= i of d2[m] * (i - m + 1)
    return sum(d * (i + 1 - m) for m, d in enumerate(diffs))


def _value_at(codec: int, data: memoryview, count: int, i: int) -> Any:
    if codec == _INT:
        return _int_at(data, count, i)
    if codec == _DEC:
        return _int_at(data[1:], count, i) / 10 ** data[0]
    if codec == _XOR:
        word = reduce(xor, _unplanes(data, count)[:i + 1], 0)
        return struct.unpack("<d", struct.pack("<Q", word))[0]
    return _decode_column(codec, data, count)[i]


def _columns(data: memoryview, n: int, ncols: int) -> Iterator[tuple[int, bytes | None, int, int]]:
    """Each column of an inflated chunk of `n` rows, after its timestamps: (codec, its presence bytes, None when it
    has a value in every row, where its payload starts and ends in `data`)."""
    pos = _HEADER.size
    (size,) = struct.unpack_from("<I", data, pos)
    pos += 4 + size
    for _ in range(ncols):
        codec, sparse, size = _COLUMN.unpack_from(data, pos)
        pos += _COLUMN.size
        present = None
        if sparse:
            present = bytes(data[pos:pos + n])
            pos += n
        yield codec, present, pos, pos + size
        pos += size


def row(blob: bytes, i: int) -> list[Any]:
    """Row i of a chunk (None where it lacks a field), its columns decoded only as far as that row: a reader
    that wants each of 10,000 series' row at one moment decodes one value a column, not 90."""
    try:
        data, n, ncols = _open(blob)
        if not 0 <= i < n:
            raise ChunkError(f"row {i} of a chunk of {n}")
        out: list[Any] = []
        for codec, present, start, end in _columns(data, n, ncols):
            if present is not None:
                out.append(_value_at(codec, data[start:end], present.count(1), present[:i].count(1))
                           if present[i] else None)
            else:
                out.append(_value_at(codec, data[start:end], n, i))
        return out
    except ChunkError:
        raise
    except (zstandard.ZstdError, struct.error, ValueError, IndexError) as e:
        raise ChunkError(f"damaged chunk: {e}") from None


def select(blob: bytes, wanted: Collection[int]) -> tuple[Sequence[int], dict[int, Sequence[Any]]]:
    """(timestamps, {column index: values}) of the columns `wanted` alone, in one inflate: a reader that
    keeps a few fields of 10,000 series' chunks (the Fleet's figures) decodes those, not all ninety rows of
    every field. Numbers come as arrays (a tenth of a list's memory), a column with gaps as a list (None)."""
    try:
        data, n, ncols = _open(blob)
        pos = _HEADER.size
        (size,) = struct.unpack_from("<I", data, pos)
        pos += 4
        column = data[pos:pos + size]
        ts = _regular(column, n) or _decode_ints(column, n)
        out: dict[int, Sequence[Any]] = {}
        for k, (codec, present, start, end) in enumerate(_columns(data, n, ncols)):
            if k in wanted:
                values = _decode_column(codec, data[start:end], present.count(1) if present is not None else n)
                if present is not None:
                    it = iter(values)
                    out[k] = [next(it) if p else None for p in present]
                elif codec in (_DEC, _XOR):
                    out[k] = array("d", values)
                elif codec == _INT:
                    out[k] = array("q", values)
                else:
                    out[k] = values
        return ts, out
    except ChunkError:
        raise
    except (zstandard.ZstdError, struct.error, ValueError, IndexError, StopIteration, OverflowError) as e:
        raise ChunkError(f"damaged chunk: {e}") from None


def decode(blob: bytes) -> tuple[list[int], list[list[Any]]]:
    """(timestamps, columns) of a chunk, as `encode` was given them."""
    try:
        data, n, ncols = _open(blob)
        pos = _HEADER.size
        (size,) = struct.unpack_from("<I", data, pos)
        pos += 4
        ts = _decode_ints(data[pos:pos + size], n)
        end = pos + size  # where the columns begin; past the loop, where the last one ends
        columns = []
        for codec, present, start, end in _columns(data, n, ncols):
            if present is not None:
                values = iter(_decode_column(codec, data[start:end], present.count(1)))
                columns.append([next(values) if p else None for p in present])
            else:
                columns.append(_decode_column(codec, data[start:end], n))
        if end != len(data):
            raise ChunkError(f"{len(data) - end} bytes left over after the last column")
        return ts, columns
    except ChunkError:
        raise
    except (zstandard.ZstdError, struct.error, ValueError, IndexError, StopIteration) as e:
        raise ChunkError(f"damaged chunk: {e}") from None

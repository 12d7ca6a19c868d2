"""The chunk codec (agent/core/chunks.py): every value round-trips bit for bit and of its type, one row or a few
columns alone are those of the whole chunk, a regular grid of timestamps is known without decoding it."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from db2vtop.agent.core import chunks
from tests.agent.store.records import T0, S

values = st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False, allow_infinity=False),
                   st.text(max_size=8), st.booleans())


column_kinds = st.sampled_from([
    st.integers(-(2**63), 2**63 - 1), st.integers(0, 10**6), st.floats(allow_nan=False, allow_infinity=False),
    st.decimals(-10**6, 10**6, places=2, allow_nan=False).map(float), st.just(7.25), values])


def same(a, b) -> bool:
    """Equal with the same type, and -0.0 told from 0.0."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return a == b


@st.composite
def chunk_data(draw):
    n = draw(st.integers(1, 60))
    ts = sorted(draw(st.lists(st.integers(0, 2**62), min_size=n, max_size=n, unique=True)))
    columns = []
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(column_kinds)
        columns.append([draw(st.one_of(st.none(), kind)) if draw(st.booleans()) else draw(kind) for _ in range(n)])
    return ts, columns


@settings(max_examples=300, deadline=None)
@given(chunk_data())
def test_every_value_comes_back_with_its_type_bit_for_bit(data):
    ts, columns = data
    back_ts, back = chunks.decode(chunks.encode(ts, columns))
    assert back_ts == ts
    assert len(back) == len(columns)
    for col, got in zip(columns, back, strict=True):
        assert all(same(a, b) for a, b in zip(col, got, strict=True)), (col, got)


@settings(max_examples=300, deadline=None)
@given(chunk_data(), st.integers(0, 59))
def test_one_row_alone_is_the_same_as_that_row_of_the_whole_chunk(data, at):
    """chunks.row decodes each column only as far as the row a reader wants (the newest before a past
    cursor, for each of 10,000 series): bit for bit what the whole decode gives, timestamps aside."""
    ts, columns = data
    i = at % len(ts)
    blob = chunks.encode(ts, columns)
    assert list(chunks.timestamps(blob)) == ts
    got = chunks.row(blob, i)
    assert len(got) == len(columns)
    assert all(same(col[i], g) for col, g in zip(columns, got, strict=True)), (i, [c[i] for c in columns], got)


@settings(max_examples=200, deadline=None)
@given(chunk_data(), st.sets(st.integers(0, 5)))
def test_chosen_columns_alone_are_the_same_as_those_of_the_whole_chunk(data, wanted):
    """chunks.select decodes the columns a reader keeps (the Fleet's figures), as numbers' arrays where it can:
    each value bit for bit and of its type, the timestamps too; the others are not handed over."""
    ts, columns = data
    got_ts, got = chunks.select(chunks.encode(ts, columns), wanted)
    assert list(got_ts) == ts
    assert set(got) == {k for k in wanted if k < len(columns)}
    for k, values in got.items():
        assert len(values) == len(ts)
        assert all(same(a, b) for a, b in zip(columns[k], values, strict=True)), (columns[k], values)


def test_a_regular_grid_of_timestamps_is_known_without_decoding_it():
    ts = [T0 + k * 20 * S for k in range(90)]
    assert chunks.timestamps(chunks.encode(ts, [[1.5] * 90])) == range(ts[0], ts[-1] + 1, 20 * S)
    ts[40] += 1  # one sample off the grid: decoded
    assert chunks.timestamps(chunks.encode(ts, [[1.5] * 90])) == ts


def test_short_decimals_and_negative_zero_are_exact():
    for column in ([0.1, 0.2, 0.30000000000000004], [-0.0, 1.5], [1e-300, 2.5], [123456.789, 0.001, 5e-10]):
        _, (back,) = chunks.decode(chunks.encode(list(range(len(column))), [column]))
        assert all(same(a, b) for a, b in zip(column, back, strict=True))

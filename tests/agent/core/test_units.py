import pytest
from hypothesis import given
from hypothesis import strategies as st

from db2vtop.agent.core.units import format_bytes, format_duration, parse_duration, parse_size


@pytest.mark.parametrize("text, seconds", [
    ("20s", 20), ("5m", 300), ("1h30m", 5400), ("7d", 604800), ("250ms", 0.25), ("1.5h", 5400),
    ("90", 90), (15, 15), (2.5, 2.5), ("1w", 604800), (" 2m 10s ", 130),
])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "5x", "m5", "-5s", "5s5", True, -1, "1h-2m"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize("text, n", [
    ("1GiB", 2**30), ("500MB", 500 * 10**6), ("64k", 64000), ("2KiB", 2048), (1024, 1024), ("10B", 10),
    ("1.5GiB", int(1.5 * 2**30)),
])
def test_sizes(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("text", ["", "GiB", "1XB", "-1", True, -5])
def test_bad_sizes(text):
    with pytest.raises(ValueError):
        parse_size(text)


@given(st.integers(min_value=1, max_value=10**7))
def test_format_duration_round_trips(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


def test_format_bytes():
    assert format_bytes(512) == "512B"
    assert format_bytes(1536) == "1.5KiB"
    assert format_bytes(3 * 2**30) == "3.0GiB"
    assert format_bytes(5 * 2**40) == "5.0TiB"


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 10**400, "nan", "inf", "-inf", "1e400",
                                   "9" * 400 + "d", "Infinity"])
def test_durations_are_finite(value):
    """TOML allows nan and inf; a duration is never one (issue 19: a NaN interval spun the agent)."""
    with pytest.raises(ValueError):
        parse_duration(value)


def test_sizes_are_finite():
    with pytest.raises(ValueError):
        parse_size("9" * 400 + "TiB")

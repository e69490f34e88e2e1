import pytest
from hypothesis import given, strategies as st

from sim.core.units import UnitError, format_size, parse_rate, parse_size, parse_time, transfer_ps


@pytest.mark.parametrize("text, expected", [
    ("4KiB", 4096), ("4 KiB", 4096), ("4KB", 4000), ("1.5MiB", 1572864), ("2B", 2), ("8MiB", 8 << 20),
    ("1GiB", 1 << 30), ("2TB", 2 * 10**12), (4096, 4096), ("4096", 4096), ("0.5KiB", 512),
])
def test_sizes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["4kib", "4 KBs", "-4KiB", "1.3B", "KiB", "4 XiB", "", True, -1, "x"])
def test_bad_sizes_name_the_accepted_forms(text):
    with pytest.raises(UnitError) as info:
        parse_size(text)
    assert "size" in str(info.value)


@pytest.mark.parametrize("text, expected", [
    ("400Gb/s", 50e9), ("55GB/s", 55e9), ("100 Gbps", 12.5e9), ("8GiB/s", 8 * 2**30), ("1Kb/s", 125.0),
])
def test_rates(text, expected):
    assert parse_rate(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("text", ["400Gb", "400 G/s", "0Gb/s", "fast", "400GT/s"])
def test_bad_rates(text):
    with pytest.raises(UnitError):
        parse_rate(text)


@pytest.mark.parametrize("text, expected", [
    ("600ns", 600_000), ("1.5us", 1_500_000), ("1.5µs", 1_500_000), ("2ms", 2 * 10**9), ("1s", 10**12),
    ("7ps", 7), (250, 250),
])
def test_times_are_integer_picoseconds(text, expected):
    value = parse_time(text)
    assert value == expected and isinstance(value, int)


@pytest.mark.parametrize("text", ["0.5ps", "600", "600 nsec", "-1ns", "1h"])
def test_bad_times(text):
    with pytest.raises(UnitError):
        parse_time(text)


def test_transfer_time_rounds_to_nearest_picosecond():
    assert transfer_ps(4096, 50e9) == 81920
    assert transfer_ps(1, 3e12) == 0 and transfer_ps(2, 3e12) == 1


@given(st.integers(min_value=0, max_value=2**50))
def test_format_size_round_trips(nbytes):
    assert parse_size(format_size(nbytes)) == nbytes

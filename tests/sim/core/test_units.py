import pytest
from hypothesis import given, strategies as st

from sim.core.units import (MAX_DURATION_PS, MAX_RATE_BPS, MAX_SIZE_B, MIN_RATE_BPS, UnitError, format_size,
                            format_size_about, format_time, parse_rate, parse_size, parse_time, transfer_ps)


@pytest.mark.parametrize("text, expected", [
    ("4KiB", 4096), ("4 KiB", 4096), ("4KB", 4000), ("1.5MiB", 1572864), ("2B", 2), ("8MiB", 8 << 20),
    ("1GiB", 1 << 30), ("2TB", 2 * 10**12), ("4096B", 4096), ("0.5KiB", 512), ("256TiB", MAX_SIZE_B),
])
def test_sizes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["4kib", "4 KBs", "-4KiB", "1.3B", "KiB", "4 XiB", "", True, "x", "257TiB",
                                  "1e400KiB", "1e9999B"])
def test_bad_sizes_name_the_accepted_forms(text):
    with pytest.raises(UnitError) as info:
        parse_size(text)
    assert "size" in str(info.value)


@pytest.mark.parametrize("text, expected", [
    ("400Gb/s", 50e9), ("55GB/s", 55e9), ("100 Gbps", 12.5e9), ("8GiB/s", 8 * 2**30), ("1Mb/s", 125e3),
])
def test_rates(text, expected):
    assert parse_rate(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("text", ["400Gb", "400 G/s", "0Gb/s", "fast", "400GT/s", "4KB/s", "1e-30Gb/s",
                                  "1e400Gb/s", "101Tb/s"])
def test_bad_rates(text):
    with pytest.raises(UnitError):
        parse_rate(text)


@pytest.mark.parametrize("text, expected", [
    ("600ns", 600_000), ("1.5us", 1_500_000), ("1.5µs", 1_500_000), ("2ms", 2 * 10**9), ("1s", 10**12),
    ("7ps", 7), ("86400s", MAX_DURATION_PS),
])
def test_times_are_integer_picoseconds(text, expected):
    value = parse_time(text)
    assert value == expected and isinstance(value, int)


@pytest.mark.parametrize("text", ["0.5ps", "600 nsec", "-1ns", "1h", "86401s", "1e7s", "1e400s", "1e-400s", True])
def test_bad_times(text):
    with pytest.raises(UnitError):
        parse_time(text)


@pytest.mark.parametrize("parse, bare, hint", [
    (parse_size, 4096, "'4096B'"), (parse_size, "4096", "'4096B'"), (parse_time, 300, "'300ns'"),
    (parse_time, 1.5, "'1.5ns'"), (parse_rate, 400, "'400Gb/s'"), (parse_rate, "-1", "'-1Gb/s'")])
def test_a_number_without_a_unit_is_refused_with_a_hint(parse, bare, hint):
    with pytest.raises(UnitError, match=f"^{bare}: give a unit, e.g. {hint}$"):
        parse(bare)


def test_rate_bounds_are_inclusive_and_named():
    assert parse_rate("1Mb/s") == MIN_RATE_BPS and parse_rate("100Tb/s") == MAX_RATE_BPS
    with pytest.raises(UnitError, match="below the minimum of 1Mb/s"):
        parse_rate("4KB/s")
    with pytest.raises(UnitError, match="above the maximum of 100Tb/s"):
        parse_rate("1e400Gb/s")


def test_format_time_uses_the_largest_unit():
    assert [format_time(t) for t in (7, 1500, 2 * 10**9, MAX_DURATION_PS)] == ["7ps", "1.5ns", "2ms", "86400s"]


def test_transfer_time_rounds_to_nearest_picosecond():
    assert transfer_ps(4096, 50e9) == 81920
    assert transfer_ps(1, 3e12) == 0 and transfer_ps(2, 3e12) == 1


@given(st.integers(min_value=0, max_value=MAX_SIZE_B))
def test_format_size_round_trips(nbytes):
    assert parse_size(format_size(nbytes)) == nbytes


@pytest.mark.parametrize("parse", [parse_size, parse_time, parse_rate])
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_an_infinity_or_nan_is_not_offered_a_unit(parse, value):
    with pytest.raises(UnitError, match=r"^expected a .*, got (-?inf|nan)$"):
        parse(value)


def test_an_approximate_size_is_shown_in_the_largest_unit_it_reaches():
    assert [format_size_about(n) for n in (512, 2**10, 64 * 2**20, 3 * 2**30 + 2**29)] == [
        "512B", "1.0KiB", "64.0MiB", "3.5GiB"]

"""perftest's published EDR bandwidths against the port model (perftest issue #225 and PR #98)."""

import json
from pathlib import Path

import pytest

from models.nic.port_calibration import compare

DATA = Path(__file__).resolve().parents[3] / "models" / "data"


def _rows(name):
    return json.loads((DATA / name).read_text())["rows"]


def test_the_tolerance_is_the_spread_of_one_ports_flat_rows():
    flat = [r["bw_Gbps"] for r in _rows("perftest_edr_send_bw.json") if r["bytes"] >= 8192]
    expected = (max(flat) - min(flat)) / (sum(flat) / len(flat))
    assert all(r.tolerance == pytest.approx(expected) for r in compare())


def test_the_host_write_row_is_within_its_tolerance():
    host = [r for r in compare() if r.required]
    assert len(host) == 1 and host[0].nbytes == 65536
    # perftest prints MB/s as 2^20 B/s (perftest_resources.c, format_factor 0x100000)
    assert host[0].measured_Gbps == pytest.approx(11728.47 * 2**20 * 8 / 1e9)
    assert host[0].sim_Gbps == pytest.approx(host[0].measured_Gbps, rel=host[0].tolerance)


def test_the_gpu_rows_sit_below_the_host_row_by_more_than_a_ports_spread():
    rows = compare()
    host = next(r for r in rows if r.required)
    gpu = [r for r in rows if not r.required]
    assert len(gpu) == len(_rows("perftest_edr_send_bw.json"))
    # what the port alone sets is the host row; the GPU rows lie below it by more than one port's spread
    assert all(r.measured_Gbps < host.measured_Gbps * (1 - host.tolerance) for r in gpu)

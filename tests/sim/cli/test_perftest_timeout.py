"""perftest's -u (the QPs' ACK timeout) in the front end: the scenario key it sets and its range (what the key
changes in a run whose link flaps is tested in test_transport_retries.py)."""

import pytest

from sim.cli.perftest import _parse, _scenario
from tests.conftest import perftest_streams


def _timeout(argv):
    return _scenario(_parse(argv))[0].workload[0].qp_timeout


def test_u_sets_the_workloads_qp_timeout_and_its_default_is_perftests():
    assert _timeout(["ib_write_bw", "-u", "8"]) == 8
    assert _timeout(["ib_write_bw"]) == 14
    assert _timeout(["ib_read_lat", "--qp-timeout=0x1f"]) == 31  # C notation, as perftest's strtol reads it


@pytest.mark.parametrize("value, said", [("32", "QP Timeout should be between 0 and 31"),
                                         ("x", "QP Timeout argument x should be int")])
def test_u_outside_ibs_five_bits_is_refused(value, said):
    code, _, text = perftest_streams(["ib_write_bw", "-u", value])
    assert code == 2 and said in text, text

"""UC and UD workloads on the vectorized core against the event engine: the step lists carry their unacknowledged
completions (a side chain to the responder), so every posted and completed time is identical, bandwidth and
latency tests alike (a ping-pong goes on from that side chain, the sender's completion forked in its place)."""

from __future__ import annotations

import pytest

from tests.conftest import scenario_dict
from tests.sim.fast.test_differential import same_runs, two_nodes


SEND_WORK = (([1, 64, 220, 4096], 1500, 128, {"rx_depth": 1500}), ([2, 4096], 100, 1, {}),
             ([512], 2000, 2, {"rx_depth": 2000}), ([64], 1000, 32, {"inline": 64}))
"""send_bw's rows of tests/sim/fast/test_send_differential.py, at most 4 KiB (UD's limit on the presets' MTU); the
first and third post every receive ahead, since a sender that waits for no ACK outruns the server's reposts."""
WRITE_WORK = (([1, 64, 220, 4096], 2500, 128, {}), ([16384, 65536], 1200, 16, {}), ([2, 1 << 20], 150, 1, {}),
              ([512], 3000, 2, {}))


@pytest.mark.parametrize("preset", ["cx7-gen5-400G", "cx6-gen4-200G-mps512"])
@pytest.mark.parametrize("kind, transport", [("write_bw", "uc"), ("send_bw", "uc"), ("send_bw", "ud")])
def test_unacknowledged_bandwidth_equals_event_engine(preset, kind, transport):
    work = [{"kind": kind, "from": "src", "to": "dst", "sizes": [f"{s}B" for s in sizes], "iterations": n,
             "tx_depth": depth, "transport": transport, **extra}
            for sizes, n, depth, extra in (SEND_WORK if kind == "send_bw" else WRITE_WORK)]
    runs = same_runs(scenario_dict(seed=5, workload=work, **two_nodes(preset)))
    assert runs[0].operations["ok"].all()


def write_bw_rates(transports: tuple[str, ...], size: str, iterations: int) -> dict[str, float]:
    """A write_bw stream's average bandwidth (Gb/s) on each of ``transports``, the same on both engines."""
    rates = {}
    for transport in transports:
        work = [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": [size], "iterations": iterations,
                 "tx_depth": 16, "transport": transport}]
        (run, _) = same_runs(scenario_dict(seed=5, workload=work, **two_nodes("cx7-gen5-400G")))
        rates[transport] = run.summary["bw_avg_Gbps"].iloc[0]
    return rates


def test_uc_outruns_rc_on_both_engines_for_small_writes():
    rates = write_bw_rates(("rc", "uc"), "64B", 3000)
    assert rates["uc"] > 1.5 * rates["rc"]  # RC's window waits a round trip for each ACK


@pytest.mark.parametrize("preset", ["cx7-gen5-400G", "cx6-gen4-200G-mps512"])
@pytest.mark.parametrize("kind, transport", [("write_lat", "uc"), ("send_lat", "uc"), ("send_lat", "ud")])
def test_unacknowledged_latency_equals_event_engine(preset, kind, transport):
    """Each message seen where it lands (a WRITE's payload, a SEND's receive completion) in the side chain of its
    steps; sizes on both sides of the inline threshold; a size after the last ends once the last messages'
    completions are polled (send_lat)."""
    work = [{"kind": kind, "from": "src", "to": "dst", "sizes": ["2B", "220B", "221B", "4KiB"], "iterations": 150,
             "transport": transport},
            {"kind": kind, "from": "src", "to": "dst", "sizes": ["64B"], "iterations": 100, "inline": 0,
             "transport": transport}]
    event, fast = same_runs(scenario_dict(seed=7, workload=work, **two_nodes(preset)))
    assert fast.operations["ok"].all() and len(fast.operations) == 4 * 150 + 100


def test_uc_latency_is_below_rc_latency_on_both_engines():
    """A UC WRITE's receiver sees it as an RC one's does, with no ACK on the way back to share the link and the
    requester's PCIe with the WRITE back: UC's round trips are no longer."""
    means = {}
    for transport in ("rc", "uc"):
        work = [{"kind": "write_lat", "from": "src", "to": "dst", "sizes": ["64B"], "iterations": 300,
                 "transport": transport}]
        (run, _) = same_runs(scenario_dict(seed=5, workload=work, **two_nodes("cx7-gen5-400G")))
        means[transport] = run.summary["t_avg_us"].iloc[0]
    assert means["uc"] <= means["rc"]

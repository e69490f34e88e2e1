"""Work requests whose payload is the NIC's own device memory (a DM MR, ``ibv_reg_dm_mr``) on both engines: the memory
target is only other claims (the MEMIC port instead of the PCIe link), so the vectorized core solves them to the
event engine's integer picoseconds. Scenarios name no device memory (a buffer is host or GPU memory), so the
testbed's registration of one buffer is replaced by a DM MR of as many bytes on the same PD, as a script would
register it."""

from __future__ import annotations

import pytest

from models.nic.wqe import Access
from models.verbs.dm import ibv_alloc_dm
from models.verbs.dm_mr import ibv_reg_dm_mr
from sim.engine import harness
from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario
from tests.conftest import scenario_dict
from tests.sim.fast.test_differential import same_runs


@pytest.fixture
def in_device_memory(monkeypatch):
    """Registers the named buffers as DM MRs of their NIC's device memory instead (each on its one NIC)."""
    def swap(*names: str) -> None:
        real = harness.build

        def build(scenario, seed, *, trace=False):
            bed = real(scenario, seed, trace=trace)
            for name in names:
                reg = bed.registrations[name]
                (nic, mr), = reg.mrs.items()
                dm = ibv_alloc_dm(mr.pd.context, reg.size_bytes)
                reg.mrs[nic] = ibv_reg_dm_mr(mr.pd, dm, 0, reg.size_bytes, mr.access | Access.ZERO_BASED)
            return bed

        monkeypatch.setattr(harness, "build", build)
    return swap


@pytest.mark.parametrize("nic", ["connectx7", "connectx6"])
@pytest.mark.parametrize("swapped", [("dst",), ("src",), ("src", "dst")])
def test_device_memory_streams_equal_event_engine(in_device_memory, nic, swapped):
    buffers = [{"name": "src", "on": "a.host", "size": "64KiB"}, {"name": "dst", "on": "b.host", "size": "64KiB"}]
    work = [{"kind": kind, "from": "src", "to": "dst", "sizes": ["64B", "4KiB", "64KiB"], "iterations": 400,
             "tx_depth": 32} for kind in ("write_bw", "read_bw", "send_bw")]
    work.append({"kind": "write_lat", "from": "src", "to": "dst", "sizes": ["8B", "4KiB"], "iterations": 100})
    nodes = [{"name": "a", "nic": {"preset": nic}}, {"name": "b", "nic": {"preset": nic}}]
    data = scenario_dict(seed=9, nodes=nodes, buffers=buffers, workload=work)
    host = run_scenario(Scenario.model_validate({**data, "engine": "event"}))
    in_device_memory(*swapped)
    event, _ = same_runs(data)   # engine: fast refuses rather than falls back
    assert not event.operations["latency_ps"].equals(host.operations["latency_ps"])  # the target changed the path

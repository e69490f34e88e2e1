"""Registration at scale, one command: ``python bench/registration_scale.py``.

Registers a 64 GiB dma-buf MR (16 M pages of 4 KiB), invalidates it with an eviction and re-faults it, and
registers a 64 GiB ODP MR and invalidates it; prints wall time and peak Python memory of each against the
targets (<= 1 s and <= 256 MiB): nothing may build a Python object per page.
"""

from __future__ import annotations

import time
import tracemalloc

from models.dmabuf import Placement
from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario

GIB = 2**30
TARGET_S, TARGET_MIB = 1.0, 256


def _scenario(register: str) -> Scenario:
    on = "a.gpu0" if register == "dmabuf" else "a.host"
    return Scenario.model_validate({
        "schema": 1, "name": "scale", "seed": 1,
        "nodes": [{"name": "a", "gpus": [{"preset": "mi300x"}], "kernel": {"dmabuf_move_notify": True}},
                  {"name": "b"}],
        "buffers": [{"name": "big", "on": on, "size": "64GiB", "register": register},
                    {"name": "dst", "on": "b.host", "size": "4KiB"}],
        "workload": [{"kind": "write_bw", "from": "big", "to": "dst", "sizes": ["4KiB"], "iterations": 4}]})


def measure(label: str, action) -> None:
    tracemalloc.start()
    started = time.perf_counter()
    action()
    wall = time.perf_counter() - started
    peak_mib = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    ok = wall <= TARGET_S and peak_mib <= TARGET_MIB
    print(f"{label:<46} {wall:7.3f} s  {peak_mib:8.1f} MiB peak   "
          f"(targets {TARGET_S} s, {TARGET_MIB} MiB: {'met' if ok else 'MISSED'})")


def dmabuf_register_invalidate_refault() -> None:
    result = run_scenario(_scenario("dmabuf"))
    backing = result.testbed.registrations["big"].mr.backing
    backing.umem.attach.dmabuf.priv.move(Placement.SYSTEM)
    assert not backing.translation_valid
    assert backing.translate(result.testbed.env.now + 10**12, 0, 4096).pages == 16 * 2**20


def odp_register_invalidate() -> None:
    result = run_scenario(_scenario("odp"))
    backing = result.testbed.registrations["big"].mr.backing
    backing.invalidate(0, 64 * GIB)
    assert not backing.mapped.any()


if __name__ == "__main__":
    measure("dma-buf 64 GiB: register, evict, re-fault", dmabuf_register_invalidate_refault)
    measure("ODP 64 GiB: register, touch, invalidate", odp_register_invalidate)

"""Registration cost at scale: device-memory registration on EFA whose cost grows with the device memory already
registered on the domain, and UCX's linear registration-cost model with the zero-copy threshold it derives.

* **EFA device memory** (``models/data/mooncake_efa_registration.json``, Mooncake PR #3210): the same 2.79 MiB
  buffer costs 70 ms registered first and 2.5 s after 9.17 GiB; a 391 MiB buffer costs 1.38 s first. The model
  is a fit to those points, not a mechanism: ``base + max(per_byte x size, per_registered_byte x prior)``, with
  ``per_registered_byte`` the source's k = 260 ms/GiB and ``base`` and ``per_byte`` from the two first
  registrations. It reproduces the published points within 5 % and the 9.23 GiB order experiment within 15 %
  (ascending 40.2 s against 35.5 s measured, descending 97.2 s against 93.3 s). Host memory does not accumulate:
  its registration costs what ``ibv_reg_mr`` of its own pages costs (pinning and the per-entry cost of
  :mod:`models.verbs.reg_calibration`).
* **UCX's model** (``models/data/ucx_registration_cost.json``): the IB memory domain's ``reg_cost`` is
  ``overhead + growth x bytes`` (16 us, 0.06 ns/B by default) and ``ucp_ep_config_get_zcopy_auto_thresh`` derives
  the zero-copy threshold ``overhead / (1/bcopy_bw - 1/bandwidth - growth)`` from it: the size above which
  registering and sending in place beats copying into a pre-registered buffer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.ib.mr_checks import EFA_VENDOR_ID
from models.nic.nic import Nic
from sim.core import PS_PER_S

DATA = Path(__file__).resolve().parents[1] / "data"
MIB, GIB = 2**20, 2**30
PS_PER_MS = PS_PER_S // 1000


@dataclass(frozen=True, slots=True)
class DeviceRegistrationCost:
    """The cost of registering device memory on a domain that already holds some (see the module docstring)."""

    base_ps: int
    """Fixed part of one registration."""
    per_byte_ps: float
    """Growth with the buffer's own size (ps per byte)."""
    per_registered_byte_ps: float
    """Growth with the device bytes already registered on the domain (ps per byte)."""

    def cost_ps(self, size: int, prior_device_bytes: int) -> int:
        """One registration of ``size`` bytes on a domain already holding ``prior_device_bytes`` (ps)."""
        return int(self.base_ps + max(self.per_byte_ps * size, self.per_registered_byte_ps * prior_device_bytes))


def load_mooncake_efa() -> tuple[DeviceRegistrationCost, dict]:
    """The EFA model fitted to Mooncake PR #3210's points, and the published data it was fitted to."""
    data = json.loads((DATA / "mooncake_efa_registration.json").read_text())
    first = {p["size_MiB"]: p["cost_ms"] for p in data["points"] if p["prior_GiB"] == 0}
    (s1, c1), (s2, c2) = sorted(first.items())
    per_mib_ms = (c2 - c1) / (s2 - s1)
    model = DeviceRegistrationCost(base_ps=round((c1 - per_mib_ms * s1) * PS_PER_MS),
                                   per_byte_ps=per_mib_ms * PS_PER_MS / MIB,
                                   per_registered_byte_ps=data["k_ms_per_GiB"] * PS_PER_MS / GIB)
    return model, data


MOONCAKE_EFA, MOONCAKE_EFA_DATA = load_mooncake_efa()


def growth_profile(nic: Nic) -> DeviceRegistrationCost | None:
    """The measured growth of device-memory registration on ``nic``'s kind of device: EFA's, or None (no
    measurement shows growth on the other devices, so their registrations cost what the verbs model says)."""
    return MOONCAKE_EFA if nic.params.device.vendor_id == EFA_VENDOR_ID else None


@dataclass
class DomainLedger:
    """Device bytes registered on one domain (a NIC's protection domain) so far; host bytes are not kept because
    they do not make later registrations dearer."""

    device_bytes: int = 0

    def register(self, size: int, *, device: bool) -> int:
        """Record a registration; return the device bytes that were registered before it."""
        prior = self.device_bytes
        if device:
            self.device_bytes += size
        return prior

    def deregister(self, size: int, *, device: bool) -> None:
        """Record a deregistration."""
        if device:
            self.device_bytes -= size


def fanout_cost_ps(profile: DeviceRegistrationCost, buffers: list[tuple[int, list[str]]]) -> dict[str, int]:
    """Register each ``(size, nics)`` buffer on every NIC of its list, one after the other, each NIC a domain
    of its own whose cost grows with what that domain already holds; return the time spent per NIC (ps). The
    fan-out multiplies the calls and, because every domain then holds more, each call costs more too (Mooncake
    issue #3217 and PR #3219: 32 domains per buffer against the 4 rail-local ones)."""
    ledgers: dict[str, DomainLedger] = {}
    spent: dict[str, int] = {}
    for size, nics in buffers:
        for nic in nics:
            prior = ledgers.setdefault(nic, DomainLedger()).register(size, device=True)
            spent[nic] = spent.get(nic, 0) + profile.cost_ps(size, prior)
    return spent


@dataclass(frozen=True, slots=True)
class LinearCost:
    """``overhead + growth x bytes`` (UCX's ``ucs_linear_func_t`` of a registration), in seconds."""

    overhead_s: float
    growth_s_per_byte: float

    def __call__(self, nbytes: float) -> float:
        return self.overhead_s + self.growth_s_per_byte * nbytes


def load_ucx() -> tuple[LinearCost, float]:
    """UCX's default IB registration cost and its default bcopy bandwidth (bytes/s)."""
    data = json.loads((DATA / "ucx_registration_cost.json").read_text())
    return LinearCost(data["reg_overhead_s"], data["reg_growth_s_per_byte"]), float(data["bcopy_bw_Bps"])


UCX_IB_REG_COST, UCX_BCOPY_BW = load_ucx()


def zcopy_auto_thresh(reg: LinearCost, bandwidth_Bps: float, bcopy_bw_Bps: float = UCX_BCOPY_BW,
                      iovcnt: int = 1) -> float:
    """``ucp_ep_config_get_zcopy_auto_thresh``: the message size (bytes) from which zero copy pays; ``inf``
    (UCX's SIZE_MAX) when registration grows faster than copying saves."""
    denominator = 1.0 / bcopy_bw_Bps - 1.0 / bandwidth_Bps - iovcnt * reg.growth_s_per_byte
    thresh = iovcnt * reg.overhead_s / denominator if denominator else math.inf
    return math.inf if thresh < 0 or denominator == 0 else thresh


def crossover(reg_cost_s: Callable[[int], float], bandwidth_Bps: float, bcopy_bw_Bps: float = UCX_BCOPY_BW,
              limit: int = 2**40) -> float:
    """The smallest size (bytes) at which copying costs at least as much as registering and sending in place,
    found by bisection over ``reg_cost_s`` (any cost function): the differential check of
    :func:`zcopy_auto_thresh`. ``inf`` when none is below ``limit``."""
    def zcopy_wins(n: int) -> bool:
        return n / bcopy_bw_Bps >= reg_cost_s(n) + n / bandwidth_Bps
    if not zcopy_wins(limit):
        return math.inf
    lo, hi = 0, limit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if zcopy_wins(mid) else (mid, hi)
    return float(hi)


def fit_linear(sizes: list[int], costs_s: list[float]) -> LinearCost:
    """Least-squares ``overhead + growth x bytes`` through measured (or simulated) registration costs."""
    growth, overhead = np.polyfit(np.asarray(sizes, dtype=float), np.asarray(costs_s, dtype=float), 1)
    return LinearCost(float(overhead), float(growth))

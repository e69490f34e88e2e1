"""Whether a rate is one the thing it describes could have: a fabric's rate is checked against the ports built,
and a rate no port runs at is refused with the unit that was likely meant (``400GBps`` is 3.2 Tb/s: 400Gb/s)."""

from __future__ import annotations

import re

from sim.core.units import UnitError, parse_rate

FASTEST_PORT_BPS = 1.6e12 / 8
"""1.6 Tb/s: the fastest Ethernet or InfiniBand port built (1.6TbE, IEEE 802.3dj; XDR InfiniBand's 2-port cards
run 800 Gb/s each). A link's rate above it is a unit slip, most often bytes written for bits (8x)."""
SLOWEST_PORT_BPS = 10e9 / 8
"""10 Gb/s: the slowest port an RDMA NIC has (InfiniBand SDR 4x, 10GbE iWARP and RoCE), so the least a
suggested spelling may mean."""

_PARTS = re.compile(r"^\s*(?P<num>[0-9.eE+-]+)\s*(?P<prefix>Ki|Mi|Gi|[KMGT]?)(?P<unit>[bB])(?:/s|ps)\s*$")


def format_Gbps(rate_Bps: float) -> str:
    """A rate in the unit ports are sold in: ``5e10 -> '400 Gb/s'``, ``4e11 -> '3.2 Tb/s'``."""
    bits = rate_Bps * 8
    return f"{bits / 1e12:g} Tb/s" if bits >= 1e12 else f"{bits / 1e9:g} Gb/s"


def _likely_meant(num: str, prefix: str, unit: str) -> str | None:
    """The spelling of the same number that a port could run at: bits for bytes, then Gb/s."""
    for candidate in ([f"{num}{prefix}b/s"] if unit == "B" else []) + [f"{num}Gb/s"]:
        try:
            if SLOWEST_PORT_BPS <= parse_rate(candidate) <= FASTEST_PORT_BPS:
                return candidate
        except UnitError:
            pass
    return None


def check_link_rate(value: object) -> object:
    """``value`` unchanged if it is not a rate faster than any port built (parsing is the Rate type's job).

    :raises ValueError: the rate is above :data:`FASTEST_PORT_BPS`, naming the spelling likely meant.
    """
    if not isinstance(value, str):
        return value
    try:
        rate = parse_rate(value)
    except UnitError:
        return value
    if rate <= FASTEST_PORT_BPS:
        return value
    parts = _PARTS.match(value)
    meant = _likely_meant(parts["num"], parts["prefix"], parts["unit"]) if parts else None
    hint = f": did you mean {meant}?" + (" (B is a byte, b a bit)" if parts["unit"] == "B" else "") if meant else ""
    raise ValueError(f"{value.strip()} is {format_Gbps(rate)}, faster than any NIC port built "
                   f"({format_Gbps(FASTEST_PORT_BPS)}){hint}")

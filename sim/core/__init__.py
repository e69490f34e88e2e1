"""The simulation core: clock, units, random streams, FIFO servers, traces and statistics.

Knows nothing of RDMA, PCIe or GPUs and never imports ``models``.
"""

from sim.core.errors import (ConfigError, DeadlockError, InvariantViolation, ProtocolError, SimError,
                             UnboundedWait, VerbsError)
from sim.core.servers import FifoServer, ServerPool
from sim.core.units import (PS_PER_MS, PS_PER_NS, PS_PER_S, PS_PER_US, format_duration, format_size, parse_rate,
                            parse_size, parse_time, transfer_ps)

__all__ = [
    "ConfigError", "DeadlockError", "Environment", "FifoServer", "InvariantViolation", "ProtocolError",
    "PS_PER_MS", "PS_PER_NS", "PS_PER_S", "PS_PER_US", "RandomStreams", "ServerPool", "SimError",
    "UnboundedWait", "VerbsError", "format_duration", "format_size", "parse_rate", "parse_size", "parse_time",
    "transfer_ps",
]


def __getattr__(name: str):
    """``Environment`` and ``RandomStreams`` on first use: they import numpy and simpy, which a module that only
    needs the errors or the units (a command line refused before any run) does without."""
    if name in ("Environment", "RandomStreams"):
        from sim.core import env

        return getattr(env, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""rdmasim: a simulator of RDMA NICs, PCIe and GPU memory registration.

``sim.core`` is the simulation kernel (time, units, random streams, traces, metrics); it knows nothing of RDMA.
``models`` holds the hardware and kernel components. The rest of ``sim``, one folder per layer (scenario,
store, engine, inspect, plot, results, sweep, cli, api), composes them.
"""

__version__ = "0.2.0"
"""The package version, recorded in every manifest (pyproject.toml reads it from here)."""

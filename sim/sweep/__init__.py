"""Parameter sweeps: a YAML file names a base scenario and axes over its keys; runs are planned with fixed
seeds, dispatched to a serial, process-pool or dask executor and stored one Parquet file per run."""

from sim.sweep.plan import RunSpec, SweepPlan, load_sweep
from sim.sweep.runner import SweepResult, run_sweep
from sim.store.sweep_table import read_table

__all__ = ["RunSpec", "SweepPlan", "SweepResult", "load_sweep", "read_table", "run_sweep"]

#!/usr/bin/env python3
"""Measure where pageable host-to-device copies lose half their bandwidth, and whether the host's last-level cache
decides it.

Standalone: PyTorch (``copy_``, i.e. ``cudaMemcpyAsync``, timed with CUDA events, the method of the H200 copy rows
in ``models/data/h200_copy_bw.json``) and numpy; no rdmasim import. Usage::

    python3 calib/gpu_copy/measure_pageable.py --out h100_pageable.json

The H200 host's pageable H2D copies ran at 16.4-16.6 GB/s at 16 and 64 MiB and at 9.9 and 9.4 GB/s at 256 MiB and
1 GiB, while pageable D2H and pinned copies kept their rates. A pageable copy goes through a pinned bounce buffer:
for H2D the driver's CPU thread reads the source, so the source's size against the last-level cache may set the
rate. Per size (4 MiB .. 1 GiB), after one warm-up, the median and best of ``--reps`` copies of:

* ``h2d_warm``: the same malloc'd (pageable, touched) source each time, as the H200 rows did;
* ``h2d_cold``: the same, with the caches flushed before each copy by reading a scratch array of ``--flush-mib``;
* ``d2h_warm``: into a pageable destination;
* ``pinned_h2d``: from pinned memory (the link's rate, for reference);
* ``cpu_copy``: numpy's ``copyto`` of the source into a second pageable array (one CPU thread's memcpy, warm).

``lscpu`` and the cache sizes in sysfs are recorded with the environment.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # calib/: the shared modules
from host_facts import command_output, run_and_save  # noqa: E402

MIB = 1 << 20
SIZES_MIB = (4, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024)


def caches() -> dict:
    """The CPU's cache levels from sysfs (level/type: size), as the kernel reports them for CPU 0."""
    found = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind, size = ((index / name).read_text().strip() for name in ("level", "type", "size"))
        except OSError:
            continue
        found[f"L{level} {kind}"] = size
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--reps", type=int, default=12)
    parser.add_argument("--flush-mib", type=int, default=2048, help="scratch read before each cold copy (MiB)")
    args = parser.parse_args()

    import numpy as np
    import torch

    def event_timed(copy) -> float:
        """One copy timed with CUDA events (s)."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        copy()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def series(copy, before=None) -> dict:
        """The median and best of ``args.reps`` timed copies after one warm-up (s), ``before`` run untimed first."""
        copy()
        torch.cuda.synchronize()
        times = []
        for _ in range(args.reps):
            if before is not None:
                before()
            times.append(event_timed(copy))
        return {"median_s": float(np.median(times)), "min_s": float(min(times)), "all_s": times}

    result = {"method": __doc__, "env": {
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "date_utc": time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "lscpu": command_output(["lscpu"]), "caches": caches(),
        "thp": command_output(["cat", "/sys/kernel/mm/transparent_hugepage/enabled"]),
        "smi": command_output(["nvidia-smi", "--query-gpu=name,driver_version,pcie.link.gen.current,"
                               "pcie.link.width.current", "--format=csv"])},
        "reps": args.reps, "flush_bytes": args.flush_mib * MIB, "errors": []}
    scratch = np.ones(args.flush_mib * MIB, np.uint8)

    def flush() -> None:
        int(scratch.view(np.uint64).sum())

    def measure(out: dict) -> None:
        out["rows"] = []
        for size_mib in SIZES_MIB:
            n = size_mib * MIB
            source = torch.from_numpy(np.ones(n, np.uint8))  # malloc'd, every page touched
            sink = torch.from_numpy(np.zeros(n, np.uint8))
            pinned = torch.ones(n, dtype=torch.uint8, pin_memory=True)
            device = torch.empty(n, dtype=torch.uint8, device="cuda")
            row = {"bytes": n}
            row["h2d_warm"] = series(lambda: device.copy_(source, non_blocking=True))
            row["h2d_cold"] = series(lambda: device.copy_(source, non_blocking=True), flush)
            row["d2h_warm"] = series(lambda: sink.copy_(device, non_blocking=True))
            row["pinned_h2d"] = series(lambda: device.copy_(pinned, non_blocking=True))
            target = sink.numpy()

            def cpu_copy() -> float:
                began = time.perf_counter()
                np.copyto(target, source.numpy())
                return time.perf_counter() - began

            cpu_copy()
            cpu = [cpu_copy() for _ in range(args.reps)]
            row["cpu_copy"] = {"median_s": float(np.median(cpu)), "min_s": float(min(cpu)), "all_s": cpu}
            out["rows"].append(row)
            del source, sink, pinned, device
            torch.cuda.empty_cache()
            print(f"{size_mib:5} MiB GB/s (median): " + ", ".join(
                f"{key} {n / row[key]['median_s'] / 1e9:.2f}" for key in
                ("h2d_warm", "h2d_cold", "d2h_warm", "pinned_h2d", "cpu_copy")), flush=True)

    run_and_save(measure, result, args.out)
    print("caches", result["env"]["caches"], "errors", result["errors"], "elapsed", round(result["elapsed_s"], 1))


if __name__ == "__main__":
    main()

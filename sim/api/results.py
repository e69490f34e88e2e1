"""A script's run as a results directory: the layout ``rdmasim run`` writes, for the work the script posted.

``metrics.parquet`` has one row per send completion the script polled (node, QP, opcode, size, times, status),
``summary.json`` one row per (node, opcode, size) with perftest's latency and bandwidth columns and the
registrations, ``manifest.json`` the testbed's description, seed, the script's text and hash and the package
versions, ``figures/`` the latency CDF. The directory is claimed and published by :mod:`sim.store.outdir` (never over
files rdmasim did not write) as :func:`sim.results.write.write_results` does.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from models.nic.wqe import WC_STATUS_NAMES, WcStatus
from sim.store import outdir
from sim.inspect.binned import cdf_curves
from sim.core.metrics import OpColumns, bandwidth_of, latency_summary
from sim.store.operations import OperationTable, write_operations
from sim.plot import figures
from sim.results.write import REPRODUCIBLE, file_sha256, json_records, package_versions, testbed_parameters
from sim.core.units import ps_to_us

COLUMNS = ["variant", "workload", "kind", "node", "qp", "wr_id", "bytes", "posted_ps", "completed_ps",
           "latency_ps", "ok", "status"]
"""The per-operation table's columns: ``kind`` is the opcode, ``workload`` names the node and opcode
(``"a RDMA_WRITE"``)."""

RECORDED = ["node", "qp", "wr_id", "kind", "bytes", "posted_ps", "completed_ps", "status"]
"""What :class:`~sim.api.testbed.Testbed` records of each polled completion (``status``: the ``ibv_wc_status``
value)."""


def write_script_results(testbed, out: str | os.PathLike, *, name: str, script: str | os.PathLike | None = None,
                         force: bool = False) -> Path:
    """Write ``testbed``'s run (every completion polled so far) into ``out``; ``script`` (the script's path)
    goes into the manifest with its hash; ``force`` replaces an earlier results directory.

    :raises OutputError: ``out`` may not be written (it holds files rdmasim did not write), or writing failed.
    """
    ops = operations(testbed)
    script_bytes = Path(script).read_bytes() if script is not None else None
    with outdir.staged(out, outdir.RUN, force=force) as (staging, target):
        write_operations([OperationTable.of(ops)], staging / "metrics.parquet")
        summary = {"script": name, "seed": testbed.seed, "results": json_records(summary_rows(ops)),
                   "registrations": registration_rows(testbed)}
        (staging / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        manifest = {"rdmasim_manifest": 1, "script": name,
                    "script_path": os.fspath(script) if script is not None else None,
                    "script_sha256": hashlib.sha256(script_bytes).hexdigest() if script_bytes is not None else None,
                    "script_text": script_bytes.decode("utf-8") if script_bytes is not None else None,
                    "testbed": testbed.spec.model_dump(mode="json", by_alias=True), "seed": testbed.seed,
                    "variants": {"base": testbed_parameters(testbed.bed)}, "versions": package_versions()}
        manifest["outputs_sha256"] = {file: file_sha256(staging / file) for file in REPRODUCIBLE}
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        figures.latency_cdf(cdf_curves([OperationTable.of(ops)]), staging / "figures", name)
    return target.path


def registration_rows(testbed) -> list[dict]:
    """One row per MR the script registered, in order: its node, where its memory is, bytes, mode (``pinned``,
    ``odp``, ``dmabuf``...), cost (us), translation entries and their page size, and whether it was deregistered
    by the end."""
    return [{"node": mr.context.name, "location": mr.location, "bytes": mr.mr.length,
             "mode": "pinned" if mr.mr.backing is None else mr.mr.backing.mode, "lkey": mr.mr.lkey,
             "register_us": ps_to_us(mr.mr.reg_ps), "mtt_entries": mr.mr.mtt_entries, "mtt_page_bytes": mr.mr.page_size,
             "deregistered": mr.closed} for mr in testbed.registrations]


def operations(testbed) -> pd.DataFrame:
    """One row per completion polled through the API, in polling order."""
    rows = pd.DataFrame(testbed.completions, columns=RECORDED)
    status = rows.pop("status").to_numpy(dtype=np.int64)
    rows.insert(0, "variant", "base")
    rows.insert(1, "workload", rows["node"] + " " + rows["kind"])
    rows["latency_ps"] = rows["completed_ps"] - rows["posted_ps"]
    rows["ok"] = status == WcStatus.SUCCESS.value
    rows["status"] = pd.Categorical.from_codes(status, categories=WC_STATUS_NAMES)
    return rows[COLUMNS]


def summary_rows(ops: pd.DataFrame) -> pd.DataFrame:
    """perftest's columns per (node, opcode, size): latency of each successful operation (post to polled
    completion) and the bandwidth of the group in posting order."""
    rows = []
    for (node, opcode, size), group in ops.groupby(["node", "kind", "bytes"], sort=True, observed=True):
        group = group.sort_values("posted_ps", kind="stable")
        ok = group["ok"].to_numpy()
        stats = OpColumns(group["posted_ps"].to_numpy(), group["completed_ps"].to_numpy(), ok)
        rows.append({"node": node, "opcode": opcode, "bytes": int(size), "operations": len(group),
                     "errors": int((~ok).sum()), **latency_summary(group["latency_ps"].to_numpy()[ok]),
                     **bandwidth_of(int(size), stats, 1)})
    return pd.DataFrame(rows)

"""Stacks for the library models: a built two-node testbed's node ``a`` with one GPU, and a process on it."""

from __future__ import annotations

from models.libs.cuda_process import CudaProcess
from models.libs.fallback import Stack
from sim.engine.build import build
from sim.scenario.schema import Scenario


def make_stack(*, data: bool = True, peermem_loaded: bool = True, dmabuf_enabled: bool = True, **node) -> Stack:
    """Node ``a`` (``node`` overrides its scenario keys; an H200 unless ``gpus`` is given) of a minimal
    scenario, built, with a fresh process on its GPU (the testbed is the stack's ``bed``)."""
    spec = {"name": "a", "gpus": [{"preset": "h200"}], **node}
    bed = build(Scenario.model_validate({
        "schema": 1, "name": "libs", "seed": 1, "data": data, "nodes": [spec, {"name": "b"}],
        "buffers": [{"name": "src", "on": "a.host", "size": "64KiB"}, {"name": "dst", "on": "b.host", "size": "64KiB"}],
        "workload": [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["4KiB"], "iterations": 5}]}), 1)
    gpu = bed.gpus["a.gpu0"]
    stack = Stack(bed.nodes["a"], bed.pds["a"], gpu, CudaProcess(gpu, data=data), peermem_loaded=peermem_loaded,
                  dmabuf_enabled=dmabuf_enabled)
    stack.bed = bed
    return stack

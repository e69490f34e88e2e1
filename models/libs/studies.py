"""What a library does over many registrations, as records the application layer turns into tables: a
training-like buffer churn through a registration cache, a fallback chain on several stacks, an order
experiment over many device buffers, and NIC device memory exported as a dma-buf and freed under its importer. Each returns plain dictionaries (times in ps) and never prints."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from models.dmabuf import dma_buf_attach, dma_buf_get, dma_buf_put
from models.dmabuf.gpu_import import GpuDmabufImport
from models.dmabuf.revoke import dma_buf_attach_revocable
from models.ib.umem_dmabuf import ib_umem_dmabuf_get_pinned
from models.libs.fallback import Stack, register_chain
from models.libs.policies import POLICIES
from models.libs.rcache import RcacheParams, RegistrationCache
from models.libs.regcost import MOONCAKE_EFA, DomainLedger, fanout_cost_ps, growth_profile
from models.pcie.server import (RailLayout, build_rail_server, cross_rail_nic, devices, flow_rates, nearest_nics,
                                rail_nics, topo_matrix)
from models.nic.wqe import Access
from models.verbs.dm import ibv_alloc_dm, ibv_dm_export_dmabuf_fd, ibv_free_dm
from models.verbs.device import Context
from models.verbs.mr import ibv_dereg_mr, ibv_reg_mr
from sim.core import SimError
from sim.core.units import format_time

ACCESS = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
PAYLOAD_BYTE = 0xA5
"""Data mode: what each step's RDMA WRITE carries (so bytes that landed elsewhere are recognisable)."""


def buffer_churn(stack: Stack, policy: str, params: RcacheParams, sizes: list[int], steps: int, lifetime: int,
                 write_bytes: int) -> tuple[list[dict], dict, list[str]]:
    """A training loop's buffers through a cache: one buffer per size lives for ``lifetime`` steps (a caching
    allocator keeps it), then is freed and allocated again, back at the same address. Every step registers each
    buffer through the cache (NCCL's user-buffer registration before a collective), receives an RDMA WRITE of
    ``write_bytes`` into it and puts the region back.

    Returns one row per step, the totals and the cache's warnings.
    """
    cache = RegistrationCache(stack, POLICIES[policy], params, ACCESS)
    process = stack.process
    rows, buffers = [], []
    for step in range(steps):
        before = asdict(cache.stats)
        lost = failed = library_ps = 0
        if step % lifetime == 0:
            for buf in buffers:
                process.free(buf)
            buffers = [process.malloc(size) for size in sizes]
        for buf in buffers:
            length = min(write_bytes, buf.size)
            lookup = cache.get(buf.addr, length)
            library_ps += lookup.cost_ps
            if lookup.region is None:
                failed += 1
                continue
            outcome = cache.write(lookup.region, buf.addr, np.full(length, PAYLOAD_BYTE, dtype=np.uint8))
            failed += not outcome.ok
            lost += length if outcome.ok and outcome.landed == "freed allocation" else 0
            cache.put(lookup.region)
        after = asdict(cache.stats)
        rows.append({"step": step, **{k: after[k] - before[k] for k in CHURN_COUNTS},
                     "failed_writes": failed, "bytes_to_freed_memory": lost, "library_ps": library_ps,
                     "vram_held_bytes": vram_held(stack)})
    totals = asdict(cache.stats) | {"regions_left": cache.regions, "vram_held_bytes": vram_held(stack),
                                    "failed_writes": sum(r["failed_writes"] for r in rows),
                                    "bytes_to_freed_memory": sum(r["bytes_to_freed_memory"] for r in rows)}
    return rows, totals, cache.warnings


CHURN_COUNTS = ("hits", "misses", "stale_hits", "rejected_stale", "registrations", "deregistrations",
                "invalidations")
"""The cache's counters each churn step reports."""


def vram_held(stack: Stack) -> int:
    """VRAM of freed allocations that an exported dma-buf still holds (bytes): what a cached dma-buf MR keeps
    from going back to the allocator."""
    return sum(a.vram.size for a in stack.process.freed if a.exports)


def fallback_chains(stacks: dict[str, Stack], policies: list[str], size: int) -> list[dict]:
    """Register one buffer of ``size`` bytes with each policy on each stack; one row each (the MR is
    deregistered and the buffer freed afterwards)."""
    rows = []
    for stack_name, stack in stacks.items():
        for policy in policies:
            buf = stack.process.malloc(size)
            result = register_chain(stack, POLICIES[policy], buf, ACCESS)
            rows.append({"stack": stack_name, "policy": policy, "method": result.method or "",
                         "error": result.error, "cost_ps": result.cost_ps,
                         "attempts": "; ".join(f"{a.method}: {a.outcome}" + (f" -> {a.action}" if a.action else "")
                                               for a in result.attempts),
                         "warnings": " | ".join(result.warnings)})
            if result.mr is not None:
                ibv_dereg_mr(result.mr)
            stack.process.free(buf)
    return rows


def registration_order(stack: Stack, sizes: list[int], orders: list[str], memory: str) -> tuple[list[dict], dict]:
    """Register ``sizes`` (device or host memory) one at a time in each order ('ascending', 'descending',
    'given'), from an empty domain each time; the cost of each registration is the verbs model's, or on a
    device with a measured growth profile (EFA) the profile's for device memory. Returns one row per
    registration and the totals per order (ps)."""
    profile = growth_profile(stack.node.nic)
    rows, totals = [], {}
    for order in orders:
        sequence = sorted(sizes) if order == "ascending" else sorted(sizes, reverse=True) \
            if order == "descending" else list(sizes)
        ledger, made, total = DomainLedger(), [], 0
        for i, size in enumerate(sequence):
            mr, verb_ps, release = _register(stack, size, memory, i)
            prior = ledger.register(size, device=memory == "device")
            cost = profile.cost_ps(size, prior) if profile is not None and memory == "device" else verb_ps
            total += cost
            rows.append({"order": order, "index": i, "size_bytes": size, "prior_device_bytes": prior,
                         "verbs_ps": verb_ps, "cost_ps": cost})
            made.append((mr, release))
        for mr, release in made:
            ibv_dereg_mr(mr)
            release()
        totals[order] = total
    return rows, totals


def _register(stack: Stack, size: int, memory: str, index: int):
    """One registration for :func:`registration_order`: (MR, the verbs model's cost, how to free the memory;
    host buffers stay mapped, as the model's host memory has no munmap)."""
    if memory == "host":
        buf = stack.node.host.allocate(f"order{index}.{len(stack.node.host.buffers)}", size)
        mr = ibv_reg_mr(stack.pd, buf.addr, size, ACCESS)
        return mr, mr.reg_ps, lambda: None
    buf = stack.process.malloc(size)
    result = register_chain(stack, POLICIES["libfabric-efa"], buf, ACCESS)
    if result.mr is None:
        raise SimError(f"registering {size} bytes of device memory failed: {result.error}")
    return result.mr, result.cost_ps, lambda: stack.process.free(buf)


def multi_nic_server(layout: RailLayout, message: int, sizes: list[int]) -> tuple[list[dict], dict, str]:
    """A rail server (:mod:`models.pcie.server`): each GPU's nearest and rail NICs, the DMA-write rate of each
    GPU's flow to its rail NIC and to a NIC on the other socket when all GPUs send at once (``message``-byte
    writes), and the cost of registering ``sizes`` of every GPU's memory on all NICs against on its rail NICs
    (EFA's measured growth, the only one measured). Returns one row per GPU, the totals and the matrix text."""
    g = build_rail_server(layout)
    gpus, nics = devices(g, "gpu"), devices(g, "nic")
    rails = {gpu: rail_nics(g, gpu, layout) for gpu in gpus}
    cross = {gpu: cross_rail_nic(g, rails[gpu][0]) for gpu in gpus}
    aligned_Bps = flow_rates(g, [(rails[gpu][0], gpu) for gpu in gpus], message)
    cross_Bps = flow_rates(g, [(cross[gpu], gpu) for gpu in gpus], message)
    everywhere = fanout_cost_ps(MOONCAKE_EFA, [(size, nics) for gpu in gpus for size in sizes])
    local = fanout_cost_ps(MOONCAKE_EFA, [(size, rails[gpu]) for gpu in gpus for size in sizes])
    rows = [{"gpu": gpu, "nearest_nics": " ".join(nearest_nics(g, gpu)), "rail_nics": " ".join(rails[gpu]),
             "cross_rail_nic": cross[gpu], "rail_aligned_GBps": a / 1e9, "cross_rail_GBps": c / 1e9}
            for gpu, a, c in zip(gpus, aligned_Bps, cross_Bps)]
    totals = {"rail_aligned_GBps": sum(aligned_Bps) / 1e9, "cross_rail_GBps": sum(cross_Bps) / 1e9,
              "register_all_nics_ps": sum(everywhere.values()), "register_rail_nics_ps": sum(local.values()),
              "registrations_all_nics": len(gpus) * len(sizes) * len(nics),
              "registrations_rail_nics": sum(len(rails[gpu]) for gpu in gpus) * len(sizes)}
    return rows, totals, topo_matrix(g)


def dm_export_study(context: Context, gpu: str, length: int, *,
                    broken: bool = False) -> tuple[list[dict], dict, list[str]]:
    """The reverse direction step by step on ``context``'s NIC: allocate ``length`` bytes of device memory, export
    it, try the importers the export refuses (a static importer, a pinned one), import it on ``gpu`` (revocably,
    :class:`~models.dmabuf.gpu_import.GpuDmabufImport`; ``broken``: an importer that keeps its mapping), access
    it, free the memory (the revocation, waited for up to its bound) and access it again.

    Returns one row per call (``call``, ``outcome``; a failed call's errno ends the walk), the totals
    (revocation time in ps, the importers that broke the promise) and the warnings (``call: outcome`` of an
    unbounded revocation and of an access that still reached the freed memory).
    """
    node = context.node
    rows: list[dict] = []

    def attempt(call: str, fn, ok):
        try:
            value = fn()
        except SimError as err:
            rows.append({"call": call, "outcome": str(err)})
            return None
        rows.append({"call": call, "outcome": ok(value)})
        return value

    dm = attempt("ibv_alloc_dm", lambda: ibv_alloc_dm(context, length), lambda _: f"{length} bytes of MEMIC")
    fd = dm and attempt("ibv_dm_export_dmabuf_fd", lambda: ibv_dm_export_dmabuf_fd(dm, invariants="record"),
                        lambda fd: f"fd {fd}")
    if fd is None:
        return rows, {}, []
    buf = dma_buf_get(node.fds, fd, caller=gpu)
    attempt("dma_buf_attach (static importer)", lambda: dma_buf_attach(buf, f"{gpu}.static"), lambda _: "attached")
    attempt("ib_umem_dmabuf_get_pinned", lambda: ib_umem_dmabuf_get_pinned(
        f"{node.name}.pinned", 0, length, node.fds, fd, True, node.kernel.config.behaviour), lambda _: "pinned")
    dma_buf_put(buf, caller=gpu)
    gpu_import = attempt("GPU import (dma_buf_dynamic_attach)", lambda: GpuDmabufImport(gpu, node.fds, fd,
                                                                                         broken=broken),
                         lambda imp: "attached, revocable: " + ("yes" if dma_buf_attach_revocable(imp.attach)
                                                                else "no"))
    if gpu_import is None:
        return rows, {}, []
    attempt("GPU access (dma_buf_map_attachment)", gpu_import.access, lambda sgt: f"{sgt.nbytes} bytes mapped")
    (revocation,) = ibv_free_dm(dm)
    exporter = dm.exports[0]
    env = node.kernel.env
    env.process(exporter.wait_unmapped(revocation))
    env.run()
    revoke_ps = revocation.unmapped_ps - revocation.started_ps if revocation.done else None
    rows.append({"call": "ibv_free_dm (revocation)", "outcome": (
        f"revoked; the GPU unmapped {format_time(revoke_ps)} after the invalidation" if revocation.done
        else "; ".join(exporter.violations) or "still mapped")})
    warnings = [f"{rows[-1]['call']}: {violation}" for violation in exporter.violations]
    if attempt("GPU access after the free", gpu_import.access,
               lambda sgt: f"{sgt.nbytes} bytes mapped (stale)") is not None:
        warnings.append(f"{rows[-1]['call']}: {rows[-1]['outcome']}")
    return rows, {"revoke_ps": revoke_ps, "broken_promises": len(revocation.broken_promises)}, warnings

"""Memory events from a script, on the simulated clock: cudaMalloc and cudaFree as the H200 measured them, another
process's allocation evicting a movable exported buffer, a VFIO revocation, a host page migration; the results
list the script's registrations."""

import json
from pathlib import Path

import pytest

from models.gpu.alloc_cost import ALLOC_PRESETS, AllocCosts
from sim.api import Access, DmaBufMR, GpuOutOfMemory, HostMemory, MR, ProtocolError, Testbed, VerbsError, WcStatus
from tests.sim.api.test_api import RW, rc_pair, write_wr

EXPORT_RULES = json.loads((Path(__file__).parents[3] / "models/data/h200_dmabuf_export_rules.json").read_text())
GiB = 1 << 30


def test_cudamalloc_after_freeing_exported_memory_matches_the_h200():
    """The H200's run (models/data/h200_dmabuf_export_rules.json, ``free_after_export``): freeing a 1 GiB allocation
    whose dma-buf fd is open leaves free VRAM unchanged, the next 1 GiB allocation gets the same address with new
    pages, and closing the fd gives the first one's VRAM back."""
    measured = EXPORT_RULES["free_after_export"]["cuMemAlloc"]
    bed = Testbed({"a": {"gpus": [{"preset": "h200"}]}}, data=False)
    gpu = bed.gpu("a.gpu0")
    before = gpu.free_bytes
    first = gpu.alloc(GiB)
    fd = first.export_dmabuf()
    allocated = gpu.free_bytes
    first.close()
    assert (gpu.free_bytes == allocated) == (measured["free_bytes_after_free_fd_open"]
                                               == measured["free_bytes_allocated"])
    second = gpu.alloc(GiB)
    assert (second.addr == first.addr) is measured["next_alloc_same_address_fd_open"]
    assert before - gpu.free_bytes == measured["free_bytes_before"] - measured["free_bytes_with_next_alloc_fd_open"]
    assert second.buffer_id != first.buffer_id  # CU_POINTER_ATTRIBUTE_BUFFER_ID is never reused
    fd.close()
    second.close()
    assert gpu.free_bytes == before
    assert gpu.alloc(GiB).addr == first.addr  # measured["next_alloc_same_address_fd_closed"]


def test_cudamalloc_and_cudafree_take_the_calibrated_time():
    bed = Testbed({"a": {"gpus": [{"preset": "h200"}]}}, data=False)
    gpu, costs = bed.gpu("a.gpu0"), AllocCosts(ALLOC_PRESETS["h200"])
    start = bed.now_ps
    buf = gpu.alloc(8 * GiB)
    assert bed.now_ps - start == costs.allocate_ps(8 * GiB) > 0
    start = bed.now_ps
    buf.close()
    assert bed.now_ps - start == costs.free_ps(8 * GiB) > 0


def test_an_allocation_larger_than_vram_is_gpu_out_of_memory():
    bed = Testbed({"a": {"gpus": [{"preset": "h200", "memory": "1GiB"}]}}, data=False)
    with pytest.raises(GpuOutOfMemory) as info:
        bed.gpu("a.gpu0").alloc(2 * GiB)
    assert info.value.errno == "ENOMEM"


def amd_bed():
    """Node b's MI300X (1 GiB) exports a buffer that node a writes into through a dynamic dma-buf MR."""
    bed = Testbed({"a": {}, "b": {"kernel": {"version": "7.1"}, "gpus": [{"preset": "mi300x", "memory": "1GiB"}]}})
    (_, _, cq, src, qp), (_, pd_b, _, _, _) = rc_pair(bed)
    gpu = bed.gpu("b.gpu0")
    buf = gpu.alloc(256 << 20)
    dst = DmaBufMR(pd_b, 1 << 16, RW, dmabuf=buf.export_dmabuf())

    def write(wr_id: int):
        qp.post_send(write_wr(src, dst, 4096, wr_id))
        _, (wc,) = cq.poll()
        return wc.status, wc.completed_ps - wc.posted_ps

    return bed, gpu, src, dst, write


def test_another_process_allocating_evicts_a_movable_buffer_whose_importer_refaults():
    """amdgpu evicts an unpinned exported buffer to make room (dma_buf_move_notify: mlx5 zaps the mkey); the NIC's
    next access re-faults (on the responder: RNR NAKs until the re-map) and the bytes moved with the buffer."""
    bed, gpu, src, dst, write = amd_bed()
    src.write(b"kept", 4)
    status, baseline = write(1)
    assert status is WcStatus.SUCCESS and dst.read(4, 0) == b"kept"
    free = gpu.free_bytes
    assert gpu.pressure(free + (128 << 20), hold="1ms")
    assert gpu.gpu.evictions == 1 and gpu.free_bytes < free
    bed.run("100us")  # past the exporter's invalidation
    assert not dst.mr.backing.translation_valid
    status, refaulted = write(2)
    assert status is WcStatus.SUCCESS and dst.mr.backing.translation_valid
    assert refaulted > 10 * baseline and dst.read(4, 0) == b"kept"
    bed.run("2ms")
    assert gpu.free_bytes == free + (256 << 20)  # the competing allocation is freed; the buffer stays in GTT


def test_pressure_on_a_static_exporter_evicts_nothing():
    """NVIDIA's exporter never moves its buffers: an allocation that does not fit fails and the MR keeps working."""
    bed = Testbed({"a": {}, "b": {"gpus": [{"preset": "h200", "memory": "1GiB"}]}}, data=False)
    (_, _, cq, src, qp), (_, pd_b, _, _, _) = rc_pair(bed)
    gpu = bed.gpu("b.gpu0")
    dst = DmaBufMR(pd_b, 1 << 16, RW, dmabuf=gpu.alloc(512 << 20).export_dmabuf())
    assert not gpu.pressure(768 << 20) and gpu.gpu.evictions == 0
    qp.post_send(write_wr(src, dst, 4096, 1))
    assert cq.poll()[1][0].status is WcStatus.SUCCESS


def test_a_vfio_revocation_makes_the_next_access_fail():
    """vfio-pci revokes (a device reset): mlx5 zaps and unmaps inside invalidate_mappings, so the revocation is
    done at once; the re-map of the next access fails and it completes with IBV_WC_LOC_PROT_ERR."""
    bed = Testbed({"a": {"kernel": {"version": "7.1"}, "gpus": [{"preset": "h200", "exporter": "vfio"}]}, "b": {}},
                  data=False)
    (_, pd_a, cq, _, qp), (_, _, _, dst, _) = rc_pair(bed)
    fd = bed.gpu("a.gpu0").alloc(1 << 20).export_dmabuf()
    bar = DmaBufMR(pd_a, 1 << 16, RW, dmabuf=fd)
    qp.post_send(write_wr(bar, dst, 4096, 1))
    assert cq.poll()[1][0].status is WcStatus.SUCCESS
    revocation = fd.revoke()
    bed.run("1ms")
    assert revocation.done and not revocation.warned
    qp.post_send(write_wr(bar, dst, 4096, 2))
    assert cq.poll()[1][0].status is WcStatus.LOC_PROT_ERR


def test_only_a_revocable_exporter_revokes():
    bed = Testbed({"a": {"gpus": [{"preset": "h200"}]}}, data=False)
    with pytest.raises(ProtocolError, match="cannot revoke"):
        bed.gpu("a.gpu0").alloc(1 << 20).export_dmabuf().revoke()


def test_a_host_page_migration_refaults_an_odp_mr_and_is_blocked_by_a_pin():
    """migrate_pages: an ODP MR's MMU notifier zaps the pages (the next access faults), a long-term pin blocks it."""
    bed = Testbed(["a", "b"], data=False)
    (_, pd_a, cq, pinned, qp), (_, _, _, dst, _) = rc_pair(bed)
    odp = MR(pd_a, 1 << 16, RW | Access.ON_DEMAND)

    def write(src):
        qp.post_send(write_wr(src, dst, 4096, 1))
        wc = cq.poll()[1][0]
        return wc.status, wc.completed_ps - wc.posted_ps

    write(odp)  # the first touch faults the page in
    status, warm = write(odp)
    assert bed.migrate_host_pages(pinned).startswith("blocked")
    assert bed.migrate_host_pages(odp).startswith("invalidated")
    status, refaulted = write(odp)
    assert status is WcStatus.SUCCESS and refaulted > warm


def test_results_list_the_scripts_registrations(tmp_path):
    bed = Testbed({"a": {"gpus": [{"preset": "h200"}]}, "b": {}}, data=False)
    (_, pd_a, _, host_mr, _), _ = rc_pair(bed)
    gpu_mr = DmaBufMR(pd_a, 1 << 16, RW, dmabuf=bed.gpu("a.gpu0").alloc(1 << 20).export_dmabuf())
    gpu_mr.close()
    out = bed.write_results(tmp_path / "out", name="regs")
    rows = json.loads((out / "summary.json").read_text())["registrations"]
    assert [(r["node"], r["location"], r["mode"], r["deregistered"]) for r in rows] == [
        ("a", "host", "pinned", False), ("b", "host", "pinned", False), ("a", "a.gpu0", "dmabuf", True)]
    assert rows[0]["register_us"] > 0 and rows[2]["bytes"] == 1 << 16


def host_bed():
    """A pair of RC QPs from node a, and a 64 KiB mapping of the script's own on node a (data mode)."""
    bed = Testbed(["a", "b"])
    (ctx_a, pd_a, cq, _, qp), (_, _, _, dst, _) = rc_pair(bed)
    mem = HostMemory(ctx_a, 1 << 16)

    def write(src, length=16):
        qp.post_send(write_wr(src, dst, length, 1))
        wc = cq.poll()[1][0]
        return wc.status, wc.completed_ps - wc.posted_ps

    return bed, pd_a, mem, dst, write


def test_an_mr_registers_memory_the_script_mapped():
    bed, pd_a, mem, dst, write = host_bed()
    mr = MR(pd_a, mem.size, RW, address=mem.addr)
    mem.write(b"from my mmap", 12)
    assert write(mr)[0] is WcStatus.SUCCESS and dst.read(12, 0) == b"from my mmap" == mr.read(12, 0)


def test_madvise_dontneed_zaps_an_odp_mr_and_the_nic_faults_in_the_new_zero_pages():
    """MADV_DONTNEED on private anonymous memory: the next load finds zero-filled pages; the MMU notifier zaps the
    ODP MR's pages (ib_umem_odp's invalidate), so the NIC's next access faults the new pages in."""
    bed, pd_a, mem, dst, write = host_bed()
    odp = MR(pd_a, mem.size, RW | Access.ON_DEMAND, address=mem.addr)
    mem.write(b"old bytes", 9)
    write(odp, 9)
    status, warm = write(odp, 9)
    assert status is WcStatus.SUCCESS and dst.read(9, 0) == b"old bytes"
    mem.madvise_dontneed()
    assert mem.read(9) == bytes(9)
    status, refaulted = write(odp, 9)
    assert status is WcStatus.SUCCESS and refaulted > warm and dst.read(9, 0) == bytes(9)


def test_madvise_dontneed_under_a_pinned_mr_is_refused_by_name():
    bed, pd_a, mem, dst, write = host_bed()
    MR(pd_a, 4096, RW, address=mem.addr + 8192)
    with pytest.raises(ProtocolError, match="pins part of the range"):
        mem.madvise_dontneed()
    mem.madvise_dontneed(0, 8192)  # the range outside the pin is fine


def test_munmap_leaves_a_pinned_mr_its_pages_and_an_odp_mr_nothing():
    """After munmap a pinned MR still reaches the pages it pinned (the pin holds them until ibv_dereg_mr); an ODP
    MR's next access faults on an unmapped range and fails (hmm_range_fault's -EFAULT: IBV_WC_LOC_PROT_ERR);
    registering the range again is EFAULT (pin_user_pages)."""
    bed, pd_a, mem, dst, write = host_bed()
    pinned = MR(pd_a, 4096, RW, address=mem.addr)
    odp = MR(pd_a, 4096, RW | Access.ON_DEMAND, address=mem.addr + 4096)
    mem.write(b"pinned", 6)
    write(odp)
    mem.close()
    assert write(pinned, 6)[0] is WcStatus.SUCCESS and dst.read(6, 0) == b"pinned"
    assert write(odp)[0] is WcStatus.LOC_PROT_ERR
    with pytest.raises(VerbsError) as info:
        MR(pd_a, 4096, RW, address=mem.addr)
    assert info.value.errno == "EFAULT"
    with pytest.raises(ProtocolError):
        mem.read(1)


def test_madvise_reaches_an_odp_mr_keyed_at_another_iova_by_its_virtual_addresses():
    """The MMU notifier covers an MR by the virtual addresses it registered, not the iova its keys use
    (``ib_umem_odp``'s interval tree holds the umem's user addresses)."""
    from sim.api import MREx

    bed = Testbed({"a": {"rdma_core": "61", "kernel": {"version": "6.18"}}, "b": {}})
    (_, pd_a, _, _, _), _ = rc_pair(bed)
    mem = HostMemory(pd_a.context, 1 << 16)
    odp = MREx(pd_a, mem.size, RW | Access.ON_DEMAND, address=mem.addr, iova=0x4000_0000)
    before = odp.mr.backing.invalidations
    mem.madvise_dontneed()
    assert odp.mr.backing.invalidations == before + 1

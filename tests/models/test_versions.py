"""Each dated kernel / rdma-core / driver behaviour, checked on both sides of its version."""

import pytest

from models.dmabuf import (DmaBufCore, DmaResvUsage, KernelConfig, Placement, StaticExporter,
                           dma_buf_attach, dma_buf_map_attachment, dma_buf_unmap_attachment)
from models.gpu import gpu_params
from models.dmabuf.gpu_export import CudaError, Gpu
from models.ib.umem_dmabuf import ib_umem_dmabuf_revoke
from models.versions import KernelBehaviour, Version
from sim.core import Environment, ProtocolError, VerbsError
from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario


def test_versions_compare_numerically():
    assert Version.parse("6.2") < Version.parse("6.12") < Version.parse("7.0")
    assert Version.parse("v34") == Version.parse("34") and str(Version.parse("5.19")) == "5.19"
    with pytest.raises(ValueError):
        Version.parse("six")


@pytest.mark.parametrize("prop, before, after", [
    ("has_dmabuf_mr", "5.11", "5.12"), ("has_pinned_dmabuf", "5.15", "5.16"),
    ("waits_kernel_fences", "5.18", "5.19"), ("static_importers_lock", "6.1", "6.2"),
    ("maps_at_attach", "6.15", "6.14"), ("maps_at_attach", "5.6", "5.7"),
    ("map_pages_returns_wait_value", "5.18", "5.19"), ("map_pages_returns_wait_value", "6.0", "5.19"),
    ("pinned_map_failure_unpins_twice", "5.15", "5.16"), ("pinned_map_failure_unpins_twice", "7.0", "6.19"),
    ("has_revoke", "6.11", "6.12"), ("has_mlx5_dmabuf_access_attr", "6.11", "6.12"),
    ("move_notify_always_on", "7.0", "7.1"), ("invalidate_optional", "7.0", "7.1"),
    ("odp_registration_snapshot", "5.9", "5.10"),
    ("mlx5_dereg_races_invalidate", "5.12", "5.13"), ("mlx5_dereg_races_invalidate", "6.14", "6.13"),
])
def test_each_behaviour_switches_at_its_version(prop, before, after):
    assert not getattr(KernelBehaviour(Version.parse(before)), prop)
    assert getattr(KernelBehaviour(Version.parse(after)), prop)


def _scenario(kernel="6.18", register="dmabuf", rdma_core="57", driver="580", move_notify=None, gpu="mi300x",
              nic="connectx7"):
    kernel_spec = {"version": kernel} | ({} if move_notify is None else {"dmabuf_move_notify": move_notify})
    return Scenario.model_validate({
        "schema": 1, "name": "v", "seed": 1,
        "nodes": [{"name": "a", "gpus": [{"preset": gpu, "driver": driver}], "kernel": kernel_spec,
                   "rdma_core": rdma_core, "nic": {"preset": nic}}, {"name": "b", "nic": {"preset": nic}}],
        "buffers": [{"name": "g", "on": "a.gpu0", "size": "4MiB", "register": register},
                    {"name": "h", "on": "b.host", "size": "4MiB"}],
        "workload": [{"kind": "write_bw", "from": "g", "to": "h", "sizes": ["4KiB"], "iterations": 1000}],
        "events": [{"at": "1us", "kind": "gpu-memory-pressure", "on": "a.gpu0", "allocate": "196606MiB"}]})


@pytest.mark.parametrize("kernel, ok", [("5.11", False), ("5.12", True)])
def test_dmabuf_mrs_arrive_in_5_12(kernel, ok):
    if ok:
        assert run_scenario(_scenario(kernel)).summary["errors"].sum() == 0
    else:
        with pytest.raises(Exception, match="EOPNOTSUPP.*5.12"):
            run_scenario(_scenario(kernel))


@pytest.mark.parametrize("kernel, ok", [("5.15", False), ("5.16", True)])
def test_efa_pinned_importer_arrives_in_5_16(kernel, ok):
    scn = _scenario(kernel, "dmabuf-pinned", nic="efa")
    if ok:
        assert run_scenario(scn).registrations["pinned_bytes"].iloc[0] == 4 << 20
    else:
        with pytest.raises(Exception, match="EOPNOTSUPP.*5.16"):
            run_scenario(scn)


@pytest.mark.parametrize("kernel, ok", [("6.11", False), ("6.12", True)])
def test_mlx5_data_direct_arrives_in_6_12(kernel, ok):
    scn = _scenario(kernel, "dmabuf-pinned", nic="connectx8")
    if ok:
        assert run_scenario(scn).registrations["pinned_bytes"].iloc[0] == 4 << 20
    else:
        with pytest.raises(Exception, match="EPROTONOSUPPORT.*6.12"):
            run_scenario(scn)


@pytest.mark.parametrize("kernel, wait, usage", [("5.18", "dma_fence_wait(excl)", DmaResvUsage.WRITE),
                                                 ("6.0", "dma_resv_wait_timeout(KERNEL)", DmaResvUsage.KERNEL)])
def test_fence_wait_kind_changes_in_5_19(kernel, wait, usage):
    """5.19 itself waits the new way but reports every map as failed (the next test), so 6.0 shows the wait."""
    scn = _scenario(kernel, move_notify=True)
    result = run_scenario(scn, trace=True)
    waits = {e.args["wait"] for e in result.testbed.env.trace.events if e.name == "FencesWaited"}
    assert waits == {wait}
    dmabuf = result.testbed.registrations["g"].mr.backing.umem.attach.dmabuf
    assert {u for _, u in dmabuf.resv.fences} == {usage}
    assert result.counters["refaults"] == 1 and result.summary["errors"].sum() == 0


@pytest.mark.parametrize("kernel, needs_lock", [("6.1", False), ("6.2", True)])
def test_static_importers_map_under_the_lock_from_6_2(kernel, needs_lock):
    core = DmaBufCore(Environment(), KernelConfig(version=kernel))
    gpu = StaticExporter(core, 1 << 20, placement=Placement.SYSTEM)
    attach = dma_buf_attach(gpu.dmabuf, "ahci")
    if needs_lock:
        with pytest.raises(ProtocolError, match="dma_resv_assert_held"):
            dma_buf_map_attachment(attach)
    else:
        dma_buf_unmap_attachment(attach, dma_buf_map_attachment(attach))


@pytest.mark.parametrize("kernel, has_revoke", [("6.11", False), ("6.12", True)])
def test_revoke_exists_from_6_12_and_release_works_either_way(kernel, has_revoke):
    result = run_scenario(_scenario(kernel, "dmabuf-pinned", nic="efa"))
    umem = result.testbed.registrations["g"].mr.backing.umem
    if has_revoke:
        ib_umem_dmabuf_revoke(umem)
        assert umem.revoked and not umem.pinned
    else:
        with pytest.raises(ProtocolError, match="6.12"):
            ib_umem_dmabuf_revoke(umem)
    from models.verbs.mr import ibv_dereg_mr
    ibv_dereg_mr(result.testbed.registrations["g"].mr)
    assert not umem.attach.dmabuf.attachments and umem.attach.dmabuf.priv.pin_count == 0


@pytest.mark.parametrize("kernel, evicts", [("7.0", False), ("7.1", True)])
def test_move_notify_default_off_until_7_1(kernel, evicts):
    """Off (7.0), the map pins and amdgpu pins into GTT: the buffer leaves VRAM at registration, so the competing
    allocation fits without evicting it; on (7.1), nothing is pinned and the pressure evicts the buffer."""
    result = run_scenario(_scenario(kernel))
    counters = result.counters
    assert (counters["evictions"], counters["failed_allocations"]) == ((1, 0) if evicts else (0, 0))
    assert result.testbed.registrations["g"].allocation.exporter.pin_migrated is not evicts


@pytest.mark.parametrize("kernel, move_notify, pinned_in", [
    ("6.14", True, Placement.SYSTEM), ("6.15", True, Placement.VRAM), ("6.15", False, Placement.SYSTEM)])
def test_amdgpu_pins_into_vram_from_6_15_with_move_notify_on(kernel, move_notify, pinned_in):
    result = run_scenario(_scenario(kernel, "dmabuf-pinned", move_notify=move_notify, nic="efa"))
    exporter = result.testbed.registrations["g"].allocation.exporter
    assert exporter.pin_placement.placement is pinned_in
    assert (result.counters["failed_allocations"] == 1) is (pinned_in is Placement.VRAM)
    assert (KernelBehaviour(Version.parse(kernel)).amdgpu_pins_into_vram) is (kernel != "6.14")


@pytest.mark.parametrize("kernel, refused", [("7.0", False), ("7.1", True)])
def test_move_notify_cannot_be_disabled_from_7_1(kernel, refused):
    from sim.scenario.refs import check_references

    problems = check_references(_scenario(kernel, move_notify=False))
    assert bool(problems) is refused and all("cannot be turned off (since 7.1)" in p[1] for p in problems)


@pytest.mark.parametrize("kernel, name", [("7.0", "dma_buf_move_notify"), ("7.1", "dma_buf_invalidate_mappings")])
def test_move_notify_is_renamed_invalidate_mappings_in_7_1(kernel, name):
    result = run_scenario(_scenario(kernel, move_notify=True), trace=True)
    names = {e.name for e in result.testbed.env.trace.events}
    assert name in names and ({"dma_buf_move_notify", "dma_buf_invalidate_mappings"} - {name}).isdisjoint(names)
    callbacks = {e.args["callback"] for e in result.testbed.env.trace.events if e.name == "MappingInvalidated"}
    assert callbacks == {"invalidate_mappings" if kernel == "7.1" else "move_notify"}


@pytest.mark.parametrize("rdma_core, register, ok", [("33", "dmabuf", False), ("34", "dmabuf", True),
                                                     ("53", "dmabuf-pinned", False), ("54", "dmabuf-pinned", True)])
def test_rdma_core_versions(rdma_core, register, ok):
    nic = "connectx8" if register == "dmabuf-pinned" else "connectx7"     # data direct: a ConnectX-8 function
    scn = _scenario(register=register, rdma_core=rdma_core, nic=nic)
    if ok:
        run_scenario(scn)
    else:
        with pytest.raises(Exception, match=f"EOPNOTSUPP: rdma-core v{rdma_core} has no"):
            run_scenario(scn)


@pytest.mark.parametrize("driver, ok", [("510", False), ("515", True)])
def test_nvidia_dmabuf_export_needs_driver_515(driver, ok):
    gpu = Gpu("g", "nvidia", gpu_params("h200"), DmaBufCore(Environment()), capacity=1 << 30, driver=driver)
    alloc = gpu.malloc("x", 1 << 20)
    from models.dmabuf import FdTable
    if ok:
        assert gpu.export(alloc, FdTable()) >= 3
    else:
        with pytest.raises(CudaError, match="CUDA_ERROR_NOT_SUPPORTED"):
            gpu.export(alloc, FdTable())


# --------------------------------------------------------------------------- historical behaviours of the RDMA core
def _kernel(version):
    from models.dmabuf import DmaBufCore, KernelConfig

    config = KernelConfig(move_notify_enabled=True, version=version)
    return DmaBufCore(Environment(), config), config.behaviour


class _Unmappable:
    """An exporter mixin whose map fails (``map_dma_buf`` returns NULL)."""

    def _map(self, attach, direction):
        return None


def _fd(exporter):
    from models.dmabuf import FdTable, dma_buf_fd

    table = FdTable("app")
    return table, dma_buf_fd(exporter.dmabuf, table)


@pytest.mark.parametrize("version, maps_at_attach", [("6.14", True), ("6.15", False)])
def test_a_dynamic_importer_of_a_static_exporter_is_mapped_at_attach_until_6_15(version, maps_at_attach):
    from models.ib.umem_dmabuf import ib_umem_dmabuf_get, ib_umem_dmabuf_map_pages, ib_umem_dmabuf_unmap_pages
    from models.dmabuf import DmaBufAttachOps

    core, kernel = _kernel(version)
    table, fd = _fd(StaticExporter(core, 1 << 20, placement=Placement.VRAM))
    ops = DmaBufAttachOps(move_notify=lambda a: None, allow_peer2peer=True)
    umem = ib_umem_dmabuf_get("mlx5_0", 0, 1 << 20, table, fd, True, ops, kernel)
    assert (umem.attach.sgt is not None) is maps_at_attach and len(umem.attach.mappings) == int(maps_at_attach)
    umem.resv.lock("mlx5_0")
    ib_umem_dmabuf_map_pages(umem)
    assert (umem.sgt is umem.attach.sgt) is maps_at_attach
    ib_umem_dmabuf_unmap_pages(umem)
    umem.resv.unlock("mlx5_0")
    assert len(umem.attach.mappings) == int(maps_at_attach)  # the cached sg table outlives the unmap


@pytest.mark.parametrize("version, fails_in", [("6.14", "get"), ("6.15", "map")])
def test_a_map_error_surfaces_from_ib_umem_dmabuf_get_while_maps_happen_at_attach(version, fails_in):
    from models.ib.umem_dmabuf import ib_umem_dmabuf_get, ib_umem_dmabuf_map_pages
    from models.dmabuf import DmaBufAttachOps

    class Broken(_Unmappable, StaticExporter):
        pass

    core, kernel = _kernel(version)
    gpu = Broken(core, 1 << 20, placement=Placement.VRAM)
    table, fd = _fd(gpu)
    ops = DmaBufAttachOps(move_notify=lambda a: None, allow_peer2peer=True)
    with pytest.raises(VerbsError, match="ENOMEM") as err:
        umem = ib_umem_dmabuf_get("mlx5_0", 0, 1 << 20, table, fd, True, ops, kernel)
        umem.resv.lock("mlx5_0")
        ib_umem_dmabuf_map_pages(umem)
    assert err.value.call == ("dma_buf_dynamic_attach" if fails_in == "get" else "dma_buf_map_attachment")
    if fails_in == "get":
        assert gpu.dmabuf.attachments == [] and gpu.dmabuf.refcount == 1  # undone: detached, reference dropped


@pytest.mark.parametrize("version, fails", [("5.18", False), ("5.19", True), ("6.0", False)])
def test_map_pages_reports_every_map_as_eperm_on_5_19(version, fails):
    scn = _scenario(version, move_notify=True)
    if fails:
        with pytest.raises(Exception, match="ib_umem_dmabuf_map_pages: EPERM.*MAX_SCHEDULE_TIMEOUT"):
            run_scenario(scn)
    else:
        assert run_scenario(scn).summary["errors"].sum() == 0


@pytest.mark.parametrize("version, unpins", [("6.18", 2), ("7.0", 1)])
def test_a_pinned_map_failure_unpins_twice_until_7_0(version, unpins):
    from models.dmabuf import MovableExporter
    from models.ib.umem_dmabuf import ib_umem_dmabuf_get_pinned

    class Broken(_Unmappable, MovableExporter):
        def _unpin(self, attach):
            self.unpins += 1
            super()._unpin(attach)

    core, kernel = _kernel(version)
    gpu = Broken(core, 1 << 20)
    gpu.unpins = 0
    table, fd = _fd(gpu)
    with pytest.raises(VerbsError, match="ENOMEM"):
        ib_umem_dmabuf_get_pinned("efa_0", 0, 1 << 20, table, fd, True, kernel)
    assert gpu.unpins == unpins and gpu.pin_count == 0 and gpu.dmabuf.attachments == []
    assert any("ttm_bo_unpin: WARN_ON_ONCE" in w for w in core.warnings) is (unpins == 2)


def test_the_second_unpin_takes_another_importers_pin_and_lets_the_buffer_move_under_it():
    from models.dmabuf import (DmaBufAttachOps, MovableExporter, check_dma, dma_buf_dynamic_attach,
                               dma_buf_map_attachment, dma_buf_pin)
    from models.ib.umem_dmabuf import ib_umem_dmabuf_get_pinned
    from sim.core import InvariantViolation

    class FailsOnce(MovableExporter):
        """Its first map fails (the RDMA importer's), later ones work."""

        def _map(self, attach, direction):
            if attach.dev == "efa_0":
                return None
            return super()._map(attach, direction)

    core, kernel = _kernel("6.18")
    gpu = FailsOnce(core, 1 << 20)
    other = dma_buf_dynamic_attach(gpu.dmabuf, "xe0", DmaBufAttachOps(move_notify=lambda a: None))
    gpu.dmabuf.resv.lock("xe0")
    dma_buf_pin(other)  # the other importer pins and maps: the buffer must stay put
    sgt = dma_buf_map_attachment(other)
    gpu.dmabuf.resv.unlock("xe0")
    table, fd = _fd(gpu)
    with pytest.raises(VerbsError, match="ENOMEM"):
        ib_umem_dmabuf_get_pinned("efa_0", 0, 1 << 20, table, fd, True, kernel)
    assert other.pin_count == 1 and gpu.pin_count == 0  # its pin went with the second unpin
    gpu.move(Placement.SYSTEM)
    with pytest.raises(InvariantViolation, match="stale mapping"):
        check_dma(sgt)


@pytest.mark.parametrize("version, warns", [("7.0", True), ("7.1", False)])
def test_pinned_importers_drop_their_warning_stub_in_7_1(version, warns):
    from models.dmabuf import MovableExporter, dma_buf_move_notify
    from models.ib.umem_dmabuf import ib_umem_dmabuf_get_pinned

    core, kernel = _kernel(version)
    gpu = MovableExporter(core, 1 << 20)
    table, fd = _fd(gpu)
    umem = ib_umem_dmabuf_get_pinned("efa_0", 0, 1 << 20, table, fd, True, kernel)
    assert (umem.attach.importer_ops.move_notify is not None) is warns
    gpu.dmabuf.resv.lock("gpu0")
    dma_buf_move_notify(gpu.dmabuf)  # an exporter that ignores the pin
    gpu.dmabuf.resv.unlock("gpu0")
    assert bool(core.warnings) is warns


@pytest.mark.parametrize("version, refused", [("7.0", True), ("7.1", False)])
def test_a_dynamic_importer_without_the_callback_attaches_from_7_1(version, refused):
    from models.dmabuf import DmaBufAttachOps, MovableExporter, dma_buf_dynamic_attach

    core, _ = _kernel(version)
    gpu = MovableExporter(core, 1 << 20)
    ops = DmaBufAttachOps(move_notify=None)
    if refused:
        with pytest.raises(VerbsError, match="EINVAL"):
            dma_buf_dynamic_attach(gpu.dmabuf, "nic0", ops)
        assert "WARN_ON" in core.warnings[-1]
    else:
        assert dma_buf_dynamic_attach(gpu.dmabuf, "nic0", ops).importer_ops is ops and core.warnings == []

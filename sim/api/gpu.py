"""The GPU side: allocate device memory, export it as a dma-buf, and CPU access to its bytes.

``GPU.alloc`` is ``cudaMalloc``/``hipMalloc`` by the script's process (:class:`models.libs.cuda_process.CudaProcess`:
a freed address comes back to the next allocation it fits, buffer IDs are never reused), :meth:`GpuBuffer.close` is
``cudaFree``; both cost the calling thread the calibrated time (:class:`models.gpu.alloc_cost.AllocCosts`), which the
clock advances by. :meth:`GpuBuffer.export_dmabuf` is ``cuMemGetHandleForAddressRange``/the amdgpu export (a file
descriptor in the process's table), and ``DmaBuf(context, size)`` is pyverbs' ``DmaBuf(size, gpu=0)``: allocate and
export in one call. Exporting is a blocking call whose simulated cost the clock advances by; CPU copies of bytes
(``read``/``write``, the script's ``cudaMemcpy``) take no simulated time.

The driver's virtual-memory calls are :class:`GPU`'s ``mem_*`` methods (``cuMemCreate`` .. ``cuMemAddressFree``,
:class:`models.libs.cuda_vmm.CudaVmm`, each on the clock at its calibrated H200 cost), and
:meth:`GPU.export_range` exports a mapped range as a :class:`DmaBuf` whose buffer is a :class:`MappedRange`.

Other users of the GPU act on the simulated clock too, as a scenario's events do: :meth:`GPU.pressure` is another
process's allocation (it evicts movable exported buffers, whose importers re-fault; freed after ``hold``), and
:meth:`DmaBuf.revoke` a VFIO exporter's revocation.
"""

from __future__ import annotations

import numpy as np

from models.dmabuf.gpu_export import GPU_PAGE
from models.dmabuf.revoke import UNMAP_BOUND_PS, Revocation, VfioExporter
from models.libs.cuda_process import CudaProcess
from models.libs.cuda_vmm import CudaVmm, VmmHandle
from sim.api.resource import Resource, zeroed
from sim.api.durations import duration_ps
from sim.engine.build import gpu_bytes
from sim.core import ProtocolError, VerbsError


class GPU:
    """One GPU of the testbed (:meth:`sim.api.Testbed.gpu`); ``gpu`` is the model
    (:class:`models.dmabuf.gpu_export.Gpu`)."""

    def __init__(self, testbed, gpu) -> None:
        self.testbed, self.gpu = testbed, gpu
        self.name = gpu.name
        self.node = testbed.bed.nodes[gpu.name.split(".")[0]]
        self.process = CudaProcess(gpu, name="script")
        """The script's allocations on this GPU."""
        self.vmm = CudaVmm(gpu, name="script")
        """The script's virtual-memory objects on this GPU (handles, reservations, mappings)."""

    @property
    def free_bytes(self) -> int:
        """VRAM not allocated (bytes)."""
        return self.gpu.memory.capacity - self.gpu.memory.used

    def alloc(self, size: int) -> GpuBuffer:
        """``cudaMalloc(size)``: a buffer of device memory, zeroed in data mode, at the lowest freed address it fits
        (else a new one); the clock advances by the call's calibrated time, after a wait for freed memory still
        being cleared where what is free and cleared falls short, and with the cost of taking back the memory
        cleared since the last allocation (:mod:`models.gpu.scrub`).

        :raises GpuOutOfMemory: no contiguous run of ``size`` bytes is free (``ENOMEM``).
        :raises VerbsError: ``ENOMEM``: data mode, and this process cannot hold the bytes (:func:`zeroed`).
        """
        buf = self.process.malloc(size)
        self._zero_fill(buf.alloc, "cudaMalloc", lambda: self.process.free(buf))
        wait, reclaim = self.gpu.clearing_ps(size, taken=buf.alloc.vram.size)  # a refused call takes nothing back
        self.testbed._advance(wait + reclaim + self.gpu.alloc_costs.allocate_ps(size))
        return GpuBuffer(self, buf)

    def _zero_fill(self, alloc, call: str, undo) -> None:
        """Data mode: ``alloc``'s bytes, zeroed; when this process cannot hold them, ``undo()`` frees the
        allocation and the ``ENOMEM`` of :func:`zeroed` is raised."""
        if self.testbed.env.data_mode:
            try:
                alloc.data = zeroed(alloc.size, call)
            except VerbsError:
                undo()
                raise

    def _vmm_call(self, call: str, nbytes: int, method, *args):
        """One driver call of :attr:`vmm` (NVIDIA only), then the clock advances by its calibrated time (for
        cuMemCreate, after a wait for freed memory still being cleared and with the cost of taking cleared memory
        back, as :meth:`alloc`)."""
        if self.gpu.vendor != "nvidia":
            raise ProtocolError(f"{call}: the CUDA virtual-memory calls are modelled on NVIDIA GPUs only "
                                f"({self.name} is {self.gpu.vendor})")
        made = method(*args)  # a refused call raises here and takes no cleared memory back
        creates = call == "cuMemCreate"
        wait, reclaim = self.gpu.clearing_ps(nbytes, taken=made.alloc.vram.size) if creates else (0, 0)
        self.testbed._advance(wait + reclaim + self.gpu.alloc_costs.call_ps(call, nbytes))
        return made

    @property
    def granularity(self) -> int:
        """``cuMemGetAllocationGranularity`` (minimum): the unit of ``mem_create`` and ``mem_map`` (bytes)."""
        return self.vmm.granularity

    def mem_create(self, size: int, flags: int = 0) -> VmmHandle:
        """``cuMemCreate``: a handle to ``size`` bytes of pinned device memory, not mapped anywhere yet.

        :raises CudaError: ``CUDA_ERROR_INVALID_VALUE`` (size not a multiple of :attr:`granularity`, flags),
            ``CUDA_ERROR_OUT_OF_MEMORY``.
        :raises VerbsError: ``ENOMEM``: data mode, and this process cannot hold the bytes (:func:`zeroed`).
        """
        handle = self._vmm_call("cuMemCreate", size, self.vmm.mem_create, size, flags)
        self._zero_fill(handle.alloc, "cuMemCreate", lambda: self.vmm.mem_release(handle))
        return handle

    def mem_address_reserve(self, size: int, alignment: int = 0, addr: int = 0, flags: int = 0) -> int:
        """``cuMemAddressReserve``: the start of a reserved virtual address range of ``size`` bytes.

        :raises CudaError: ``CUDA_ERROR_INVALID_VALUE`` (size or hint not 4 KiB multiples, alignment, flags).
        """
        return self._vmm_call("cuMemAddressReserve", size, self.vmm.address_reserve, size, alignment, addr, flags)

    def mem_map(self, ptr: int, size: int, handle: VmmHandle, offset: int = 0, flags: int = 0) -> None:
        """``cuMemMap``: map ``handle`` at ``[ptr, ptr + size)`` of a reservation (no access until
        :meth:`mem_set_access`).

        :raises CudaError: ``CUDA_ERROR_INVALID_VALUE`` (offset not zero, past the handle, not granular, outside
            one reservation, already mapped, flags).
        """
        self._vmm_call("cuMemMap", size, self.vmm.mem_map, ptr, size, handle, offset, flags)

    def mem_set_access(self, ptr: int, size: int) -> None:
        """``cuMemSetAccess``: read-write access for this GPU over a fully mapped range.

        :raises CudaError: ``CUDA_ERROR_INVALID_VALUE``: some of the range is not mapped.
        """
        self._vmm_call("cuMemSetAccess", size, self.vmm.set_access, ptr, size)

    def mem_unmap(self, ptr: int, size: int) -> None:
        """``cuMemUnmap`` of whole mappings: the range is reserved again; a released handle's memory goes back
        when its last mapping goes, unless a dma-buf still holds it.

        :raises CudaError: ``CUDA_ERROR_INVALID_VALUE``: a sub-range of a mapping, or nothing mapped.
        """
        self._vmm_call("cuMemUnmap", size, self.vmm.mem_unmap, ptr, size)

    def mem_release(self, handle: VmmHandle) -> None:
        """``cuMemRelease``: the memory goes back once it is unmapped everywhere and no dma-buf holds it.

        :raises CudaError: ``CUDA_ERROR_INVALID_VALUE``: released already.
        """
        self._vmm_call("cuMemRelease", handle.size, self.vmm.mem_release, handle)

    def mem_address_free(self, ptr: int, size: int) -> None:
        """``cuMemAddressFree`` of a whole reservation with nothing mapped in it.

        :raises CudaError: ``CUDA_ERROR_INVALID_VALUE``: not a reservation's ptr and size, or mappings left.
        """
        self._vmm_call("cuMemAddressFree", size, self.vmm.address_free, ptr, size)

    def export_range(self, ptr: int, size: int, flags: int = 0) -> DmaBuf:
        """``cuMemGetHandleForAddressRange(DMA_BUF_FD)`` of a mapped range, which may span several allocations
        mapped back to back: a :class:`DmaBuf` holding each of them until it is closed.

        :raises CudaError: ``CUDA_ERROR_INVALID_VALUE`` (not fully mapped, not 4 KiB multiples, unknown flags),
            ``CUDA_ERROR_NOT_SUPPORTED`` (the PCIe mapping-type flag off a coherent platform).
        """
        if self.gpu.vendor != "nvidia":
            raise ProtocolError(f"export_range: the CUDA virtual-memory calls are modelled on NVIDIA GPUs only "
                                f"({self.name} is {self.gpu.vendor})")
        return DmaBuf._export(MappedRange(self, ptr, size), 0, size, owns_buffer=False, flags=flags)

    def pressure(self, size: int, hold: str | int | None = None) -> bool:
        """Another process allocates ``size`` bytes of this GPU now (a scenario's ``gpu-memory-pressure``): the
        driver evicts movable exported buffers until it fits (an importer's ``move_notify`` zaps its mappings; its
        next access re-faults), pinned and NVIDIA memory stays. With ``hold`` (``"2ms"`` or int ps) the memory is
        freed that long after. The script's clock does not move: another thread pays the call. Returns whether the
        allocation fit (False: nothing movable was left to evict).
        """
        held = None if hold is None else duration_ps(hold)
        fitted = self.gpu.pressure(size)
        if fitted and held is not None:
            self.testbed.env.process(self.gpu.release_pressure_after(held))
        return fitted


class DeviceRange(Resource):
    """Device memory at a virtual address range of the script's process, whose bytes the CPU can copy."""

    holders: tuple = ()
    """The allocations an export of it holds (none beyond its own :attr:`alloc`)."""

    def __init__(self, gpu: GPU, alloc) -> None:
        self.gpu, self.alloc = gpu, alloc
        """``alloc``: the model's :class:`~models.dmabuf.gpu_export.GpuAllocation`."""
        self.exported = (0, alloc.size)
        """``[start, end)`` of the buffer that its exporter keeps (where an exporter that moves the buffer has its
        bytes); the whole buffer until an export says otherwise."""

    @property
    def addr(self) -> int:
        """Device virtual address."""
        return self.alloc.addr

    @property
    def size(self) -> int:
        """Bytes."""
        return self.alloc.size

    def write(self, data: bytes | str, length: int, offset: int = 0) -> None:
        """Copy ``length`` bytes of ``data`` into the buffer at ``offset`` (``cudaMemcpy`` host to device).

        :raises ProtocolError: not in data mode, or a range outside the buffer.
        """
        data = data.encode() if isinstance(data, str) else data
        self.bytes(f"{type(self).__name__}.write", offset, length)[:] = np.frombuffer(data[:length], dtype=np.uint8)

    def read(self, length: int, offset: int = 0) -> bytes:
        """``length`` bytes at ``offset`` where the buffer is now (``cudaMemcpy`` device to host).

        :raises ProtocolError: as :meth:`write`.
        """
        return self.bytes(f"{type(self).__name__}.read", offset, length).tobytes()

    def bytes(self, call: str, offset: int, length: int) -> np.ndarray:
        """A writable view of ``[offset, offset + length)`` of the buffer's true contents (data mode)."""
        self._check_open(call)
        if not self.gpu.testbed.env.data_mode:
            raise ProtocolError(f"{call}: CPU access to bytes needs data mode (Testbed(data=True))")
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ProtocolError(f"{call}: [{offset}, {offset + length}) is outside the {self.size} B buffer")
        start, end = self.exported
        if start <= offset and offset + length <= end:
            return gpu_bytes(self.alloc)[offset - start:offset - start + length]
        if offset + length <= start or offset >= end:
            return self.alloc.data[offset:offset + length]
        raise ProtocolError(f"{call}: [{offset}, {offset + length}) crosses the edge of the exported range "
                            f"[{start}, {end}); access the two parts separately")



class GpuBuffer(DeviceRange):
    """Device memory from :meth:`GPU.alloc`; :meth:`close` is ``cudaFree`` (an exported dma-buf keeps the
    memory until its last reference goes, as the NVIDIA driver does; the address is free for the next
    allocation at once)."""

    def __init__(self, gpu: GPU, buf) -> None:
        super().__init__(gpu, buf.alloc)
        self.device_buffer = buf

    @property
    def buffer_id(self) -> int:
        """``CU_POINTER_ATTRIBUTE_BUFFER_ID``: unique in the process, never reused (unlike the address)."""
        return self.device_buffer.buffer_id

    def export_dmabuf(self, offset: int = 0, size: int | None = None, flags: int = 0) -> DmaBuf:
        """Export ``[offset, offset + size)`` of the buffer as a dma-buf file descriptor of the process, with
        ``cuMemGetHandleForAddressRange``'s ``flags``.

        :raises CudaError: the exporter's rules (4 KiB multiples, driver 515+, range inside the buffer, the
            PCIe mapping-type flag only on a coherent platform).
        """
        self._check_open("export_dmabuf")
        return DmaBuf._export(self, offset, size, owns_buffer=False, flags=flags)

    def _destroy(self) -> None:
        self.gpu.testbed._advance(self.gpu.gpu.alloc_costs.free_ps(self.size))
        self.gpu.process.free(self.device_buffer)  # once cudaFree returns: the memory's clearing starts then


class MappedRange(DeviceRange):
    """A mapped range of the script's VMM memory as :meth:`GPU.export_range` exported it (a :class:`DmaBuf`'s
    ``buffer``); its bytes are those of the allocation mapped there. Closing it does nothing: the range stays
    mapped until :meth:`GPU.mem_unmap`.

    :raises CudaError: the range is not fully mapped (:meth:`models.libs.cuda_vmm.CudaVmm.range_view`).
    """

    def __init__(self, gpu: GPU, ptr: int, size: int) -> None:
        view, self.holders = gpu.vmm.range_view(ptr, size)
        super().__init__(gpu, view)


class DmaBuf(Resource):
    """A dma-buf of GPU memory, as pyverbs' ``DmaBuf(size, gpu=0, gtt=0)``: ``size`` bytes (rounded up to whole
    4 KiB pages, as a DRM buffer object is) allocated on GPU number ``gpu`` of ``context``'s node and exported.
    ``fd`` is its file descriptor; :meth:`close` closes the fd and frees the allocation it made (MRs registered
    from it keep their own reference, as in the kernel).

    :raises ConfigError: the node has no GPU number ``gpu``; ``EOPNOTSUPP`` for ``gtt`` (not modelled).
    """

    def __init__(self, context, size: int, gpu: int = 0, gtt: int = 0) -> None:
        context._check_open("DmaBuf")
        if gtt:
            raise VerbsError("EOPNOTSUPP", "GTT allocations are not modelled (VRAM only)", call="DmaBuf")
        names = [name for name in context.testbed.bed.gpus if name.split(".")[0] == context.name]
        device = context.testbed.gpu(names[gpu] if 0 <= gpu < len(names) else f"{context.name}.gpu{gpu}")
        self._init(device.alloc(-(-size // GPU_PAGE) * GPU_PAGE), 0, None, owns_buffer=True)

    @classmethod
    def _export(cls, buffer: DeviceRange, offset: int, size: int | None, *, owns_buffer: bool,
                flags: int = 0) -> DmaBuf:
        dmabuf = cls.__new__(cls)
        dmabuf._init(buffer, offset, size, owns_buffer=owns_buffer, flags=flags)
        return dmabuf

    def _init(self, buffer: DeviceRange, offset: int, size: int | None, *, owns_buffer: bool,
              flags: int = 0) -> None:
        self.buffer, self.offset, self._owns = buffer, offset, owns_buffer
        gpu, node = buffer.gpu, buffer.gpu.node
        kernel, exporter = node.kernel, buffer.alloc.exporter
        try:
            self.fd = gpu.gpu.export(buffer.alloc, node.fds, offset, size, flags, holders=buffer.holders)
        except BaseException:
            if owns_buffer:
                buffer.close()
            raise
        self.size = buffer.size - offset if size is None else size
        if buffer.alloc.exporter is not exporter:  # a new exporter (amdgpu re-exports its first buffer object)
            buffer.exported = (offset, offset + self.size)
        kernel.wait_until(node.nic.name, kernel.now_ps(gpu.name))  # one thread: the export, then what follows
        gpu.testbed._advance(0)

    def revoke(self, bound: str | int = UNMAP_BOUND_PS) -> Revocation:
        """The exporter revokes the buffer now, as vfio-pci does at a device reset (a scenario's ``dmabuf-revoke``):
        every importer's mapping is invalidated (their next access completes in error) and the exporter waits
        for their unmaps, WARNing after ``bound`` (``"1s"`` or int ps), on the simulated clock. The script's clock
        does not move. Returns the model's record of it (``done``, ``unmapped_ps``, ``warned``, ``left_mapped``).

        :raises ProtocolError: the buffer's exporter cannot revoke (only a GPU with ``exporter: vfio`` can), or it
            was already revoked.
        """
        self._check_open("DmaBuf.revoke")
        exporter, bound_ps = self.buffer.alloc.exporter, duration_ps(bound)
        if not isinstance(exporter, VfioExporter):
            raise ProtocolError(f"DmaBuf.revoke: the {self.buffer.gpu.gpu.vendor} exporter cannot revoke its "
                                "buffers (a GPU with exporter: vfio can)")
        revocation = exporter.start_revocation()
        self.buffer.gpu.testbed.env.process(exporter.wait_unmapped(revocation, bound_ps))
        return revocation

    def _destroy(self) -> None:
        node = self.buffer.gpu.node
        node.kernel.wait_until(node.fds.owner, node.kernel.now_ps(node.nic.name))
        node.fds.close(self.fd)
        if self._owns:
            self.buffer.close()

"""The GPU side: allocate device memory, export it as a dma-buf, and CPU access to its bytes.

``GPU.alloc`` is ``cudaMalloc``/``hipMalloc``, :meth:`GpuBuffer.export_dmabuf` is
``cuMemGetHandleForAddressRange``/the amdgpu export (a file descriptor in the process's table), and
``DmaBuf(context, size)`` is pyverbs' ``DmaBuf(size, gpu=0)``: allocate and export in one call. Exporting is a
blocking call whose simulated cost the clock advances by; CPU copies of bytes (``read``/``write``, the script's
``cudaMemcpy``) take no simulated time.
"""

from __future__ import annotations

import numpy as np

from models.dmabuf.gpu_export import GPU_PAGE
from sim.api.resource import Resource, zeroed
from sim.engine.build import gpu_bytes
from sim.core import ProtocolError, VerbsError


class GPU:
    """One GPU of the testbed (:meth:`sim.api.Testbed.gpu`); ``gpu`` is the model
    (:class:`models.dmabuf.gpu_export.Gpu`)."""

    def __init__(self, testbed, gpu) -> None:
        self.testbed, self.gpu = testbed, gpu
        self.name = gpu.name
        self.node = testbed.bed.nodes[gpu.name.split(".")[0]]
        self._allocations = 0

    @property
    def free_bytes(self) -> int:
        """VRAM not allocated (bytes)."""
        return self.gpu.memory.capacity - self.gpu.memory.used

    def alloc(self, size: int) -> GpuBuffer:
        """``cudaMalloc(size)``: a buffer of device memory, zeroed in data mode.

        :raises GpuOutOfMemory: no contiguous run of ``size`` bytes is free (``ENOMEM``).
        :raises VerbsError: ``ENOMEM``: data mode, and this process cannot hold the bytes (:func:`zeroed`).
        """
        self._allocations += 1
        alloc = self.gpu.malloc(f"buf{self._allocations}", size)
        if self.testbed.env.data_mode:
            try:
                alloc.data = zeroed(size, "cudaMalloc")
            except VerbsError:
                self.gpu.free(alloc)
                raise
        return GpuBuffer(self, alloc)


class GpuBuffer(Resource):
    """Device memory from :meth:`GPU.alloc`; :meth:`close` is ``cudaFree`` (an exported dma-buf keeps the
    memory until its last reference goes, as the NVIDIA driver does)."""

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

    def export_dmabuf(self, offset: int = 0, size: int | None = None) -> DmaBuf:
        """Export ``[offset, offset + size)`` of the buffer as a dma-buf file descriptor of the process.

        :raises CudaError: the exporter's rules (4 KiB multiples, driver 515+, range inside the buffer).
        """
        self._check_open("export_dmabuf")
        return DmaBuf._export(self, offset, size, owns_buffer=False)

    def write(self, data: bytes | str, length: int, offset: int = 0) -> None:
        """Copy ``length`` bytes of ``data`` into the buffer at ``offset`` (``cudaMemcpy`` host to device).

        :raises ProtocolError: not in data mode, or a range outside the buffer.
        """
        data = data.encode() if isinstance(data, str) else data
        self.bytes("GpuBuffer.write", offset, length)[:] = np.frombuffer(data[:length], dtype=np.uint8)

    def read(self, length: int, offset: int = 0) -> bytes:
        """``length`` bytes at ``offset`` where the buffer is now (``cudaMemcpy`` device to host).

        :raises ProtocolError: as :meth:`write`.
        """
        return self.bytes("GpuBuffer.read", offset, length).tobytes()

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

    def _destroy(self) -> None:
        self.gpu.gpu.free(self.alloc)


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
    def _export(cls, buffer: GpuBuffer, offset: int, size: int | None, *, owns_buffer: bool) -> DmaBuf:
        dmabuf = cls.__new__(cls)
        dmabuf._init(buffer, offset, size, owns_buffer=owns_buffer)
        return dmabuf

    def _init(self, buffer: GpuBuffer, offset: int, size: int | None, *, owns_buffer: bool) -> None:
        self.buffer, self.offset, self._owns = buffer, offset, owns_buffer
        gpu, node = buffer.gpu, buffer.gpu.node
        kernel, exporter = node.kernel, buffer.alloc.exporter
        try:
            self.fd = gpu.gpu.export(buffer.alloc, node.fds, offset, size)
        except BaseException:
            if owns_buffer:
                buffer.close()
            raise
        self.size = buffer.size - offset if size is None else size
        if buffer.alloc.exporter is not exporter:  # a new exporter (amdgpu re-exports its first buffer object)
            buffer.exported = (offset, offset + self.size)
        kernel.wait_until(node.nic.name, kernel.now_ps(gpu.name))  # one thread: the export, then what follows
        gpu.testbed._advance(0)

    def _destroy(self) -> None:
        node = self.buffer.gpu.node
        node.kernel.wait_until(node.fds.owner, node.kernel.now_ps(node.nic.name))
        node.fds.close(self.fd)
        if self._owns:
            self.buffer.close()

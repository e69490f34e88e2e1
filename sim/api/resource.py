"""What every object of the public API shares: ``close()`` (once; later calls do nothing; the objects that use it
closed first, as pyverbs' ``close_weakrefs`` does), use as a context manager, a typed error for use after close,
and the zeroed bytes of the buffers it allocates in data mode."""

from __future__ import annotations

import numpy as np

from sim.core import ProtocolError, VerbsError
from sim.core.units import format_size


class Resource:
    """An object that holds a simulated kernel or driver object until :meth:`close`."""

    _closed = False

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran."""
        return self._closed

    @property
    def _uses(self) -> tuple:
        """The API objects this one uses (its PD, its CQs, its SRQ, its channel; None where it has none)."""
        return ()

    def close(self) -> None:
        """Close the open objects that use this one, newest first (pyverbs' ``close_weakrefs``: a PD closes its QPs,
        AHs, MRs and SRQs, a CQ or an SRQ its QPs, a completion channel its CQs), then destroy the underlying
        object (the verbs layer underneath still answers ``EBUSY`` to a destroy of an object in use). A second
        call does nothing, as in pyverbs.

        :raises VerbsError: the kernel refuses; the object stays open.
        """
        if not self._closed:
            context = getattr(self, "context", None)
            for obj in reversed(getattr(context, "_objects", ())):
                if not obj.closed and any(used is self for used in obj._uses):
                    obj.close()
            self._destroy()
            self._closed = True

    def _destroy(self) -> None:
        """Release the underlying object (each kind of object says how)."""

    def _check_open(self, call: str) -> None:
        """:raises ProtocolError: the object was closed."""
        if self._closed:
            raise ProtocolError(f"{call}: {type(self).__name__} used after close()")


def zeroed(size: int, call: str) -> np.ndarray:
    """``size`` zero bytes of a buffer the API allocates in data mode (pyverbs' ``posix_memalign`` and ``memset``),
    held in this process's memory.

    :raises VerbsError: ``ENOMEM``, as ``posix_memalign`` returns it, when this process cannot hold them (the
        simulated node may have the memory; the script's process does not).
    """
    try:
        return np.zeros(size, dtype=np.uint8)
    except MemoryError:
        raise VerbsError("ENOMEM", f"data mode keeps a buffer's bytes in this process, which cannot allocate "
                         f"{format_size(size)}; a testbed without data mode (Testbed(data=False)) simulates buffers "
                         "of any size", call=call) from None


def process_buffer(context, length: int, call: str, prefix: str):
    """A zeroed buffer of ``length`` bytes of the script's process on ``context``'s node (pyverbs' ``posix_memalign``
    and memset, or an ``mmap``), named ``prefix`` and a number; its bytes are kept in data mode.

    :raises VerbsError: ``ENOMEM`` in data mode when this process cannot hold the bytes (:func:`zeroed`).
    """
    host = context.ctx.node.host
    contents = zeroed(length, call) if context.testbed.env.data_mode else None
    buf = host.allocate(f"{prefix}{len(host.buffers)}", length)
    if contents is not None:
        host.fill(buf.name, lambda: contents)
    return buf

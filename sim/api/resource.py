"""What every object of the public API shares: ``close()`` (once; later calls do nothing), use as a context
manager, a typed error for use after close, and the zeroed bytes of the buffers it allocates in data mode."""

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

    def close(self) -> None:
        """Destroy the underlying object (a second call does nothing, as in pyverbs).

        :raises VerbsError: the kernel refuses (``EBUSY`` while another object uses it); the object stays open.
        """
        if not self._closed:
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

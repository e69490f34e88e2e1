"""What every object of the public API shares: ``close()`` (once; later calls do nothing), use as a context
manager, and a typed error for use after close."""

from __future__ import annotations

from sim.core import ProtocolError


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

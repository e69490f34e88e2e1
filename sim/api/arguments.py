"""The types of the API's arguments, checked at its edge as pyverbs' Cython does when it fills a C struct.

pyverbs stores each argument in a field of an rdma-core struct (``struct ibv_sge``'s ``uint32_t length``,
``struct ibv_send_wr``'s ``uint64_t wr_id`` and ``enum ibv_wr_opcode opcode``, ``ibv_create_cq``'s ``int cqe``): a
value of another Python type raises ``TypeError`` there, before any verbs call runs. :class:`ArgumentTypeError` is
that TypeError, typed as rdmasim's own (:class:`~sim.core.SimError`) and naming the call, the argument and its C
type. An integer too wide for its field goes on to the verbs layer, which refuses it with ``EINVAL``
(:func:`models.verbs.send_checks.check_c_widths`, ``ibv_alloc_dm``'s length).
"""

from __future__ import annotations

from sim.core import SimError


class ArgumentTypeError(SimError, TypeError):
    """An argument of the wrong Python type (what Cython's conversion to the C field refuses with TypeError)."""


def c_integer(value, c_type: str, name: str, call: str) -> int:
    """``value``, an integer for a C field of ``c_type`` (``bool`` and ``IntEnum``/``IntFlag`` members are ints, as
    in C).

    :raises ArgumentTypeError: not an integer (a ``str``, a ``float``, None).
    """
    if not isinstance(value, int):
        raise ArgumentTypeError(f"{call}: {name} must be an integer (a C {c_type}), got {type(value).__name__} "
                                f"{value!r:.40}")
    return value

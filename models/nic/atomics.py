"""What an atomic does to the 8 bytes it targets (``IBV_WR_ATOMIC_CMP_AND_SWP``, ``IBV_WR_ATOMIC_FETCH_AND_ADD``).

The operands travel big-endian in the AtomicETH (mlx5's ``set_atomic_seg`` writes them with ``htobe64``), but
memory holds host-order values: mlx5 reports ``IBV_ATOMIC_HCA`` only when the device answers in host byte order
(``get_atomic_caps`` in drivers/infiniband/hw/mlx5/main.c needs ``atomic_req_8B_endianness_mode``; otherwise it
reports ``IBV_ATOMIC_NONE``), so on the little-endian hosts modelled here the target and the original value the
requester receives are little-endian 64-bit integers. Arithmetic is modulo 2**64.
"""

from __future__ import annotations

import numpy as np

from models.nic.wqe import ATOMIC_BYTES, Opcode

HOST_BYTE_ORDER = "little"
"""Byte order of 64-bit values in memory (x86 hosts)."""
U64 = 2**64


def atomic_result(opcode: Opcode, old: int, compare_add: int, swap: int) -> int:
    """The value an atomic leaves in memory that held ``old``."""
    if opcode is Opcode.ATOMIC_FETCH_AND_ADD:
        return (old + compare_add) % U64
    return swap % U64 if old == compare_add % U64 else old


def apply_atomic(target: np.ndarray, opcode: Opcode, compare_add: int, swap: int) -> np.ndarray:
    """Data mode: run the atomic on the 8 bytes ``target`` (a writable view of memory) and return their original
    bytes (the response's payload)."""
    old = target.copy()
    new = atomic_result(opcode, int.from_bytes(old.tobytes(), HOST_BYTE_ORDER), compare_add, swap)
    target[:] = np.frombuffer(new.to_bytes(ATOMIC_BYTES, HOST_BYTE_ORDER), dtype=np.uint8)
    return old

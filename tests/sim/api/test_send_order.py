"""RC sends a QP's requests in posting (PSN) order and its responder executes them in that order: a request posted
behind an RDMA WRITE sees the WRITE's bytes, whatever it waits for itself (the WRITE waits for its payload's DMA
read, a READ, an atomic or an inline WRITE does not)."""

from __future__ import annotations

import pytest

from sim.api import Opcode, QPCap, SendFlags, SendWR, Testbed, WcStatus
from tests.sim.api.test_api_recv import pair, poll_n

TARGET, SOURCE, LANDING = 256, 8192, 512
"""Offsets: the remote bytes every work request here touches, the WRITE's payload, where responses land."""
WRITTEN = bytes(range(1, 9)) * 512
"""The leading WRITE's 4 KiB payload."""
FIRST = int.from_bytes(WRITTEN[:8], "little")


def _follower(a, b, kind: str) -> SendWR:
    """The work request posted right behind the WRITE, on the same QP."""
    flags = SendFlags.SIGNALED | (SendFlags.FENCE if kind == "fenced read" else 0)
    if kind in ("read", "fenced read"):
        wr = SendWR(wr_id=2, opcode=Opcode.RDMA_READ, num_sge=1, sg=[a.sge(LANDING, 8)], send_flags=flags)
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf + TARGET)
    elif kind == "inline write":
        a.mr.write(b"inline!!", 8, LANDING)
        wr = SendWR(wr_id=2, opcode=Opcode.RDMA_WRITE, num_sge=1, sg=[a.sge(LANDING, 8)],
                    send_flags=flags | SendFlags.INLINE)
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf + TARGET)
    else:
        wr = SendWR(wr_id=2, opcode=Opcode.ATOMIC_FETCH_AND_ADD, num_sge=1, sg=[a.sge(LANDING, 8)], send_flags=flags)
        wr.set_wr_atomic(b.mr.rkey, b.mr.buf + TARGET, 5)
    return wr


@pytest.mark.parametrize("kind, landed, remote", [
    ("read", WRITTEN[:8], WRITTEN[:8]),                  # RC executes a READ after the WRITE before it, unfenced
    ("fenced read", WRITTEN[:8], WRITTEN[:8]),
    ("fetch and add", WRITTEN[:8], (FIRST + 5).to_bytes(8, "little")),
    ("inline write", b"inline!!", b"inline!!"),          # the later WRITE's bytes win
], ids=lambda value: value if isinstance(value, str) else "")
def test_a_request_behind_a_write_on_its_qp_sees_the_write(kind, landed, remote):
    bed = Testbed()
    a, qa, b, _ = pair(bed, QPCap(max_send_wr=16, max_inline_data=64))
    a.mr.write(WRITTEN, len(WRITTEN), SOURCE)
    write = SendWR(wr_id=1, opcode=Opcode.RDMA_WRITE, num_sge=1, sg=[a.sge(SOURCE, len(WRITTEN))],
                   send_flags=SendFlags.SIGNALED)
    write.set_wr_rdma(b.mr.rkey, b.mr.buf + TARGET)
    qa.post_send(write)
    qa.post_send(_follower(a, b, kind))
    wcs = poll_n(a.scq, 2)
    assert [(wc.wr_id, wc.status) for wc in wcs] == [(1, WcStatus.SUCCESS), (2, WcStatus.SUCCESS)]
    assert a.mr.read(8, LANDING) == landed and b.mr.read(8, TARGET) == remote
    assert b.mr.read(len(WRITTEN) - 8, TARGET + 8) == WRITTEN[8:]

"""What a message puts on the wire beyond its payload, against the packet formats of the InfiniBand spec as the
kernel's rxe driver and perftest's packet captures show them."""

import pytest

from models.fabric import AETH, RETH, FabricParams
from sim.core import PS_PER_S

BTH, LRH, ICRC, VCRC = 12, 8, 4, 2


def test_a_write_first_packet_is_as_long_as_ibdump_captured_it():
    # perftest issue #225: ibdump of ib_write_bw over a 100 Gb/s IB port, MTU 4096: packets of about 4138 bytes,
    # the first packet of each message (LRH, BTH, RETH, payload, ICRC, VCRC).
    first = FabricParams(transport="ib", mtu=4096).wire_bytes(4096, RETH)
    assert first == 4138 == 4096 + LRH + BTH + RETH + ICRC + VCRC


@pytest.mark.parametrize("transport, header", [("ib", LRH + BTH + ICRC + VCRC), ("roce", 82)])
@pytest.mark.parametrize("mtu", [1024, 4096])
@pytest.mark.parametrize("n", [1, 4096, 3 * 4096 + 100])
def test_a_read_response_carries_an_aeth_on_its_first_and_last_packets_only(transport, header, mtu, n):
    # rxe_opcode.c: RDMA_READ_RESPONSE_FIRST, _LAST and _ONLY are BTH + AETH; _MIDDLE is BTH alone.
    fabric = FabricParams(transport=transport, mtu=mtu)
    packets = -(-n // mtu)
    aeths = 1 if packets == 1 else 2
    assert fabric.wire_bytes(n, AETH, 0, AETH) == n + -n % 4 + packets * header + aeths * AETH


@pytest.mark.parametrize("n", [1, 2, 3, 5, 4099])
def test_a_payload_is_padded_to_four_bytes(n):
    # rxe's init_req_packet: pad = (-payload) & 0x3, carried in BTH PadCnt.
    fabric = FabricParams(transport="ib", mtu=4096)
    assert fabric.wire_bytes(n) - fabric.wire_bytes(n - n % 4) == (4 if n % 4 else 0) + (26 if n == 4099 else 0)


def test_ib_flow_control_packets_take_their_share_of_the_link_and_ethernet_has_none():
    n = 1 << 20
    ib, roce = FabricParams(transport="ib"), FabricParams(transport="roce")
    # one 6-byte FC packet per 4 x 65,536 byte times of a 4X link (IBA vol. 1, 7.9.4)
    assert ib.serialize_ps(n) == round(ib.wire_bytes(n) * PS_PER_S / (ib.rate_Bps * (1 - 6 / 262144)))
    assert roce.serialize_ps(n) == round(roce.wire_bytes(n) * PS_PER_S / roce.rate_Bps)

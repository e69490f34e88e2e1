"""The workload kinds' table is the one place each kind's posting rule is read from: the schema takes exactly its
kinds, each names a loop that exists, and its rules are perftest's (perftest's README and src/perftest_parameters.c:
``change_conn_type`` refuses UC for READ and atomic tests and UD for all but SEND; only ib_write_lat and
ib_send_lat inline by default; the latency tests run one QP)."""

import typing

import pytest

import models.verbs.workloads as loops
from models.verbs.workload_kinds import BANDWIDTH_KINDS, KINDS, LATENCY_KINDS
from sim.scenario.workloads import WorkloadSpec


def test_the_schema_takes_exactly_the_tables_kinds():
    assert typing.get_args(WorkloadSpec.model_fields["kind"].annotation) == tuple(KINDS)


@pytest.mark.parametrize("name", list(KINDS))
def test_each_kind_names_a_loop_that_exists_and_the_test_perftest_ships(name):
    kind = KINDS[name]
    assert callable(getattr(loops, kind.loop))
    assert kind.test == f"ib_{name}"


def test_bandwidth_and_latency_kinds_partition_the_table():
    assert set(BANDWIDTH_KINDS).isdisjoint(LATENCY_KINDS)
    assert set(BANDWIDTH_KINDS) | set(LATENCY_KINDS) == set(KINDS)
    assert all(name.endswith("_bw") for name in BANDWIDTH_KINDS)  # perftest's names say which tests stream


def test_perftests_rules():
    assert {n for n, k in KINDS.items() if "uc" in k.transports} == {"write_bw", "write_lat", "send_bw", "send_lat"}
    assert {n for n, k in KINDS.items() if "ud" in k.transports} == {"send_bw", "send_lat"}
    assert {n for n, k in KINDS.items() if k.inline_by_default} == {"write_lat", "send_lat"}
    assert {n for n, k in KINDS.items() if k.ping_pong} == {"write_lat", "send_lat"}
    assert {n for n, k in KINDS.items() if k.receives} == {"send_bw", "send_lat"}
    assert [KINDS[n].window(tx_depth=64) for n in ("write_bw", "read_lat", "write_lat")] == [64, 1, 1]


@pytest.mark.parametrize("kind,qps", [("read_lat", 2), ("send_lat", 4)])
def test_a_latency_kind_measures_one_qp(kind, qps):
    with pytest.raises(ValueError, match="measures one QP"):
        WorkloadSpec.model_validate({"kind": kind, "from": "a", "to": "b", "sizes": ["64B"], "qps": qps})

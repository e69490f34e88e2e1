import pytest

from models.libs.fallback import fallback_table, probe_dmabuf, register_chain
from models.libs.policies import EXPORT_FAILED, POLICIES
from models.nic.wqe import Access
from tests.models.libs.stacks import make_stack

ACCESS = Access.LOCAL_WRITE | Access.REMOTE_WRITE
FAILURES = ("EOPNOTSUPP", "EINVAL", "EPROTONOSUPPORT", "EFAULT", "ENOMEM", EXPORT_FAILED)
EXPECTED = {  # per policy, per step: the failures after which the chain moves on (the cited rules)
    "nccl": {"dmabuf": set(), "peermem": set(), "host-staging": set()},
    "libfabric-efa": {"dmabuf": set(FAILURES), "peermem": set()},
    "ucx": {"dmabuf": {EXPORT_FAILED}, "peermem": set(), "host-staging": set()},
    "ucx-rocm-11934": {"dmabuf": set(), "peermem": set()},
    "mori": {"dmabuf": set(FAILURES), "peermem": set()},
    "peermem-first": {"peermem": set(FAILURES), "dmabuf": set()},
}


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_fallback_table_per_policy_and_errno(policy):
    rows = fallback_table(POLICIES[policy], FAILURES)
    got = {}
    for row in rows:
        got.setdefault(row["method"], set())
        if row["action"] == "next":
            got[row["method"]].add(row["failure"])
    assert got == EXPECTED[policy]


def chain(policy, **stack):
    s = make_stack(data=False, **stack)
    return register_chain(s, POLICIES[policy], s.process.malloc(1 << 20), ACCESS)


def test_the_probe_answers_ebadf_where_dmabuf_mrs_exist_and_eopnotsupp_before_5_12():
    assert probe_dmabuf(make_stack(data=False)) == "EBADF"
    assert probe_dmabuf(make_stack(data=False, kernel={"version": "5.10"})) == "EOPNOTSUPP"


def test_on_a_kernel_without_dmabuf_mrs_nccl_skips_dmabuf_by_its_probe_and_libfabric_falls_back_on_the_errno():
    nccl, efa = chain("nccl", kernel={"version": "5.10"}), chain("libfabric-efa", kernel={"version": "5.10"})
    assert nccl.method == efa.method == "peermem"
    assert nccl.attempts[0].outcome.startswith("skipped: the probe") and nccl.attempts[0].action == ""
    assert (efa.attempts[0].outcome, efa.attempts[0].action) == ("EOPNOTSUPP", "next")


def test_without_a_peer_memory_client_the_kernel_answers_efault_and_nccl_and_ucx_stage_through_host_memory():
    assert chain("mori", kernel={"version": "5.10"}, peermem_loaded=False).error == "EFAULT"
    for policy in ("nccl", "ucx"):
        staged = chain(policy, kernel={"version": "5.10"}, peermem_loaded=False)
        assert staged.method == "host-staging" and "host staging" in staged.warnings[0]
        assert staged.attempts[1].outcome == "skipped: no peer-memory client loaded"


def test_a_failed_export_falls_back_in_ucx_and_is_a_registration_error_in_the_rocm_default_of_11934():
    ucx, rocm = chain("ucx", gpus=[{"driver": "510"}]), chain("ucx-rocm-11934", gpus=[{"driver": "510"}])
    assert ucx.method == "peermem" and ucx.attempts[0].outcome == "CUDA_ERROR_NOT_SUPPORTED"
    assert rocm.mr is None and rocm.error == "CUDA_ERROR_NOT_SUPPORTED" and "registration error" in rocm.warnings[0]


def test_the_switch_skips_dmabuf_and_the_reverse_order_tries_peer_memory_first():
    assert chain("nccl", dmabuf_enabled=False).method == "peermem"
    reverse = chain("peermem-first", peermem_loaded=False)
    assert [a.method for a in reverse.attempts] == ["peermem", "dmabuf"] and reverse.method == "dmabuf"


def test_an_amdgpu_buffer_moved_to_gtt_registers_without_error_but_warns_of_no_peer_to_peer():
    cross = chain("mori", gpus=[{"preset": "mi300x"}], topology="cross_socket",
                  kernel={"version": "6.8", "dmabuf_move_notify": True})
    switch = chain("mori", gpus=[{"preset": "mi300x"}], kernel={"version": "6.8", "dmabuf_move_notify": True})
    assert cross.method == switch.method == "dmabuf" and cross.error == switch.error == ""
    assert "no peer-to-peer" in cross.warnings[0] and switch.warnings == []

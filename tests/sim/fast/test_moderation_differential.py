"""Completions moderated (perftest -Q, ``cq_mod``) and post lists with one completion each (perftest -l) on the
vectorized core against the event engine: every ``cq_mod``-th work request (and a fixed count's last) signaled, the
unsignaled ones writing no CQE and taking the time of the completion that covers them; every row, summary and
counter identical."""

from __future__ import annotations

import pytest

from tests.conftest import scenario_dict
from tests.sim.fast.test_differential import falls_back, same_runs, two_nodes


def moderated(kind: str, cq_mod: int, tx_depth: int, sizes=("64B", "4KiB"), **extra) -> dict:
    return {"kind": kind, "from": "src", "to": "dst", "sizes": list(sizes), "cq_mod": cq_mod,
            "tx_depth": tx_depth, **extra}


@pytest.mark.parametrize("preset", ["cx7-gen5-400G", "cx5-gen3x8-100G-roce"])
@pytest.mark.parametrize("kind", ["write_bw", "send_bw"])
@pytest.mark.parametrize("cq_mod, tx_depth", [(100, 128), (7, 64), (16, 16)])
def test_moderated_completions_equal_the_event_engine(preset, kind, cq_mod, tx_depth):
    """Iteration counts that are and are not multiples of the moderation (the last is signaled either way), and a
    tx depth that is not a multiple of it."""
    work = [moderated(kind, cq_mod, tx_depth, iterations=1000), moderated(kind, cq_mod, tx_depth, ("256B",),
                                                                          iterations=3 * cq_mod + 1)]
    event, fast = same_runs(scenario_dict(seed=4, workload=work, **two_nodes(preset)))
    covered = fast.operations.groupby(["bytes"], sort=False)["completed_ps"].nunique().tolist()
    assert covered[0] <= -(-1000 // cq_mod)  # a completion's time for every work request it covers


@pytest.mark.parametrize("kind", ["write_bw", "send_bw"])
def test_a_moderated_duration_leaves_out_what_no_completion_covers(kind):
    """A timed loop stops posting wherever the time is up: the unsignaled work requests after its last signaled one
    are in no record, on both engines, and the run ends once they have completed."""
    work = [moderated(kind, 10, 64, ("1KiB",), duration="40us")]
    event, fast = same_runs(scenario_dict(seed=9, workload=work, **two_nodes("cx7-gen5-400G")))
    assert len(fast.operations) % 10 == 0 and len(fast.operations) > 100


def test_a_moderated_duration_followed_by_another_workload_runs_on_the_event_engine():
    work = [moderated("write_bw", 10, 64, ("1KiB",), duration="20us"), moderated("write_bw", 4, 16, ("64B",),
                                                                                  iterations=100)]
    falls_back(scenario_dict(seed=9, workload=work, **two_nodes("cx7-gen5-400G")),
               "posts for a while with completions", "ends the run")


def test_moderated_reads_run_on_the_event_engine():
    data = scenario_dict(seed=9, workload=[moderated("read_bw", 10, 64, iterations=200)],
                         **two_nodes("cx7-gen5-400G"))
    falls_back(data, "moderates completions", "one stream of WRITEs or SENDs")


def test_the_work_requests_a_completion_covers_take_its_time():
    """perftest counts ``cq_mod`` work requests per completion polled: each aligned run of ``cq_mod`` ends with the
    signaled one whose completion covers them all, and a fixed count's last run ends with its last."""
    work = [moderated("write_bw", 8, 32, ("64B",), iterations=203)]
    event, fast = same_runs(scenario_dict(seed=1, workload=work, **two_nodes("cx7-gen5-400G")))
    done = fast.operations["completed_ps"].to_numpy()
    runs = [done[lo:lo + 8] for lo in range(0, 203, 8)]
    assert all((run == run[-1]).all() for run in runs) and len({int(run[-1]) for run in runs}) > 1


@pytest.mark.parametrize("kind", ["write_bw", "send_bw"])
@pytest.mark.parametrize("lists, tx_depth", [(8, 128), (16, 100), (5, 64)])
def test_post_lists_with_one_completion_each_equal_the_event_engine(kind, lists, tx_depth):
    """perftest -l N (its moderation N): a list of N work requests, one ibv_post_send and the NIC fetching each
    WQE, goes once N slots are free, whole lists only (a tx depth that is not a multiple of N leaves the rest
    unused); a fixed count and a duration."""
    work = [moderated(kind, lists, tx_depth, ("64B", "4KiB"), iterations=40 * lists, post_list=lists),
            moderated(kind, lists, tx_depth, ("1KiB",), duration="30us", post_list=lists)]
    same_runs(scenario_dict(seed=6, workload=work, **two_nodes("cx7-gen5-400G")))


def test_post_lists_with_several_completions_each_run_on_the_event_engine():
    data = scenario_dict(seed=9, workload=[moderated("write_bw", 4, 64, iterations=200, post_list=8)],
                         **two_nodes("cx7-gen5-400G"))
    falls_back(data, "posts lists with more than one completion", "posts lists")

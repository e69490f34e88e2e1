"""Random mixes of the behaviours the product compares, run by default (``engine: auto``) and on the event engine:
a source buffer in GPU memory that the exporter moves (a competing allocation held a while, eviction storms), a link
that flaps (its frames held or lost), at random times against streams of random sizes and depths. Whatever engine
``auto`` picks for each, every table and counter is the event engine's: the vectorized core takes a run only where
it is exact, and says why it leaves one to the event engine."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_differential import auto_runs, pin_vs_dmabuf
from tests.properties import examples

SIZES = {"64KiB": 1_400, "1MiB": 21_000}
"""Each message size with about the time one WRITE of it takes on the 400 Gb/s link (ns): events are drawn within
the run."""


@st.composite
def events(draw, span_ns: int) -> list[dict]:
    """One to three events at times inside a run of about ``span_ns`` (an event's ``at`` counts from the start of
    the first workload)."""
    at = st.integers(span_ns // 50, span_ns).map(lambda ns: f"{ns}ns")
    pressure = st.fixed_dictionaries({"at": at, "kind": st.just("gpu-memory-pressure"), "on": st.just("a.gpu0"),
                                      "allocate": st.just("7.5GiB"),
                                      "hold": st.integers(span_ns // 20, span_ns).map(lambda ns: f"{ns}ns")})
    storm = st.fixed_dictionaries({"at": at, "kind": st.just("eviction-storm"), "on": st.just("a.gpu0"),
                                   "count": st.integers(1, 3),
                                   "every": st.integers(span_ns // 10, span_ns).map(lambda ns: f"{ns}ns")})
    flap = st.fixed_dictionaries({"at": at, "kind": st.just("link-flap"), "node": st.sampled_from(["a", "b"]),
                                  "duration": st.integers(200, 60_000).map(lambda ns: f"{ns}ns"),
                                  "frames": st.sampled_from(["held", "lost"])})
    mix = draw(st.lists(st.one_of(pressure, storm, flap), min_size=1, max_size=3))
    return sorted(mix, key=lambda event: int(event["at"][:-2]))


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), kind=st.sampled_from(["write_bw", "read_bw"]), size=st.sampled_from(sorted(SIZES)),
       depth=st.sampled_from([4, 16, 64]), iterations=st.integers(200, 1_500))
def test_random_mixes_of_moves_and_link_flaps_equal_the_event_engine(data, kind, size, depth, iterations):
    mix = data.draw(events(SIZES[size] * iterations))
    auto_runs(pin_vs_dmabuf(mix, iterations, size, depth, kind))


def test_a_move_while_the_last_re_fault_is_handled_goes_to_the_event_engine():
    """The storm's second eviction zaps the source again while the first access after the first zap still waits
    for its re-map (``DmabufBacking.translate``: accesses before the new zap reach the old pages, they no longer
    wait), which the vectorized core's holds would not let through: ``auto`` runs the event engine, saying so.
    (Drawn by the property above: the core held those accesses until the first re-map was done.)"""
    storm = {"at": "84000ns", "kind": "eviction-storm", "on": "a.gpu0", "count": 2, "every": "552542ns"}
    auto, lines = auto_runs(pin_vs_dmabuf([storm], 200, "1MiB", 16, "write_bw"))
    assert auto.engine == "event" and "buffer 'src' moved again at" in lines[0] and "re-fault was handled" in lines[0]

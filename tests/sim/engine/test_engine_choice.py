"""``engine: auto`` is the default wherever a scenario runs (a file, perftest, a sweep, ``run_scenario``): one line
per variant says which engine ran its workloads and, for a fallback, why in words; the manifest records the engine
that ran each workload, and ``repro`` re-runs on it."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from typer.testing import CliRunner

from sim.cli.app import app
from sim.cli.perftest import perftest_scenario
from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario
from tests.conftest import scenario_dict, tiny_yaml
from tests.sim.fast.test_differential import gpu_reads

runner = CliRunner()
RAW = re.compile(r"\d ?ps\b|WcStatus\.|\bNone\b")
"""What a notice never shows: raw picoseconds, Python reprs."""
TWO_VARIANTS = tiny_yaml("{kind: write_bw, name: stream, from: src, to: dst, sizes: [4KiB], iterations: 40}",
                         "{kind: read_lat, from: src, to: dst, sizes: [64B], iterations: 10}",
                         tail="variants:\n  - {name: pinned, set: {buffers.src.register: pinned}}\n"
                              "  - {name: odp, set: {buffers.dst.register: odp}}\n")
ODP_REASON = "ODP maps a page when the NIC first touches it"
"""Why an ODP buffer at the responder keeps a run on the event engine (its faults answer RNR NAKs)."""


def test_the_default_engine_is_auto_for_scenarios_and_perftest():
    assert Scenario.model_validate(scenario_dict()).engine == "auto"
    assert Scenario.model_json_schema(by_alias=True)["properties"]["engine"]["default"] == "auto"
    assert perftest_scenario(["ib_write_bw", "-s", "4K", "-n", "20"]).engine == "auto"


def test_run_scenario_says_in_one_line_which_engine_ran_and_records_it():
    lines = []
    result = run_scenario(Scenario.model_validate(scenario_dict()), notice=lines.append)
    assert lines == ["t (base): vectorized core ran write_bw"]
    assert (result.engine, result.fallback) == ("fast", None)
    lines.clear()
    odp = scenario_dict()
    odp["buffers"][1]["register"] = "odp"
    result = run_scenario(Scenario.model_validate(odp), variant="odp", notice=lines.append)
    (line,) = lines
    assert line.startswith("t (odp): event engine ran write_bw: ") and ODP_REASON in line and not RAW.search(line)
    assert result.engine == "event" and ODP_REASON in result.fallback


def test_engine_event_is_said_without_a_reason():
    lines = []
    result = run_scenario(Scenario.model_validate(scenario_dict(engine="event")), notice=lines.append)
    assert lines == ["t (base): event engine ran write_bw"] and result.fallback is None


def test_run_prints_one_engine_line_per_variant_and_the_manifest_names_the_engine_of_each_workload(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text(TWO_VARIANTS)
    done = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "res"), "-q"])
    assert done.exit_code == 0, done.output
    said = [line for line in done.stderr.splitlines() if not line.startswith("wrote ")]
    assert said[0] == "tiny (pinned): vectorized core ran stream, read_lat"
    assert said[1].startswith("tiny (odp): event engine ran stream, read_lat: ") and ODP_REASON in said[1]
    assert len(said) == 2 and not any(RAW.search(line) for line in said)
    manifest = json.loads((tmp_path / "res" / "manifest.json").read_text())
    assert manifest["scenario"]["engine"] == "auto"
    pinned, odp = manifest["engines"]["pinned"], manifest["engines"]["odp"]
    assert pinned == {"requested": "auto", "fallback": None,
                      "workloads": [{"workload": "stream", "engine": "fast"},
                                    {"workload": "read_lat", "engine": "fast"}]}
    assert [w["engine"] for w in odp["workloads"]] == ["event", "event"] and ODP_REASON in odp["fallback"]


def test_the_engine_option_is_recorded_as_asked_and_as_run(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text(TWO_VARIANTS)
    done = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "ev"), "-q", "--engine", "event"])
    assert done.exit_code == 0, done.output
    assert "tiny (pinned): event engine ran stream, read_lat\n" in done.stderr
    engines = json.loads((tmp_path / "ev" / "manifest.json").read_text())["engines"]
    assert {v["requested"] for v in engines.values()} == {"event"}
    assert {w["engine"] for v in engines.values() for w in v["workloads"]} == {"event"}
    assert all(v["fallback"] is None for v in engines.values())


def test_repro_reruns_each_variant_on_the_engine_that_ran_it(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text(TWO_VARIANTS)
    assert runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "res"), "-q"]).exit_code == 0
    again = runner.invoke(app, ["repro", str(tmp_path / "res")])
    assert again.exit_code == 0, again.output
    assert "variant 'pinned': re-run on the vectorized core, as recorded" in again.stdout
    assert "variant 'odp': re-run on the event engine, as recorded" in again.stdout
    files = json.loads((tmp_path / "res" / "manifest.json").read_text())["files_sha256"]
    assert again.stdout.count("identical") == len(files)  # each file the run wrote, re-run bit for bit


def test_repro_says_when_the_rerun_engine_differs_from_the_record(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text(TWO_VARIANTS)
    assert runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "res"), "-q"]).exit_code == 0
    manifest_file = tmp_path / "res" / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    for work in manifest["engines"]["pinned"]["workloads"]:
        work["engine"] = "event"  # the re-run now runs the event engine, whose outputs are the same bytes
    manifest_file.write_text(json.dumps(manifest, indent=1) + "\n")
    again = runner.invoke(app, ["repro", str(tmp_path / "res")])
    assert again.exit_code == 0 and "variant 'pinned': re-run on the event engine, as recorded" in again.stdout
    assert again.stdout.count("identical") == len(manifest["files_sha256"])


@pytest.mark.parametrize("argv, ran", [
    (["ib_write_bw", "-s", "4K", "-n", "50"], "ib_write_bw (base): vectorized core ran ib_write_bw"),
    (["ib_write_bw", "-s", "4K", "-n", "50", "--engine", "event"], "ib_write_bw (base): event engine ran ib_write_bw"),
])
def test_perftest_says_which_engine_ran_in_one_line(argv, ran):
    done = runner.invoke(app, ["perftest", *argv])
    assert done.exit_code == 0, done.output
    assert done.stderr.splitlines().count(ran) == 1 and "engine ran" not in done.stdout


def test_perftest_names_why_auto_fell_back():
    done = runner.invoke(app, ["perftest", "ib_send_bw", "-b", "-s", "64", "-n", "50"])
    said = [line for line in done.stderr.splitlines() if "engine ran" in line]
    assert len(said) == 1 and said[0].startswith("ib_send_bw (base): event engine ran ib_send_bw: ")
    assert "is a bidirectional send_bw" in said[0] and not RAW.search(said[0])


def test_sweep_says_which_engine_ran_each_run_and_stores_it(tmp_path):
    (tmp_path / "s.yaml").write_text(TWO_VARIANTS)
    (tmp_path / "sweep.yaml").write_text("schema: 1\nkind: sweep\nname: sw\nbase: s.yaml\n"
                                         "grid:\n  variant: [pinned, odp]\n")
    done = runner.invoke(app, ["sweep", str(tmp_path / "sweep.yaml"), "--out", str(tmp_path / "out")])
    assert done.exit_code == 0, done.output
    said = [line for line in done.stderr.splitlines() if "engine ran" in line or "core ran" in line]
    assert said[0] == "sw run 0 (pinned): vectorized core ran stream, read_lat"
    assert said[1].startswith("sw run 1 (odp): event engine ran stream, read_lat: ") and ODP_REASON in said[1]
    assert len(said) == 2
    table = pd.read_parquet(tmp_path / "out" / "summary.parquet")
    assert list(table.drop_duplicates("run")["engine"]) == ["fast", "event"]
    assert table.drop_duplicates("run")["fallback"].iloc[0] == ""


def test_auto_hands_a_crawl_to_the_event_engine_by_the_latest_pieces_cut_short():
    """CrawlWatch: 32 pieces cut short keeping 24 operations each, after 40 that kept 500, are a crawl (the
    latest 32 average below 100), as they would be at the start of a run; 32 that average 100 or more are not."""
    from sim.engine.planner.plan import CRAWL_BLOCKS, CrawlWatch, _Crawling

    watch = CrawlWatch()
    for _ in range(40):
        watch.cut_short(500)
    with pytest.raises(_Crawling):  # (the average of all 72 would be 288)
        for _ in range(CRAWL_BLOCKS):
            watch.cut_short(24)
    calm = CrawlWatch()
    for n in [24] * (CRAWL_BLOCKS - 1) + [100 * CRAWL_BLOCKS - 24 * (CRAWL_BLOCKS - 1)]:
        calm.cut_short(n)


def test_a_read_stream_that_crawls_after_a_size_solved_in_long_blocks_runs_on_the_event_engine():
    """Two QPs READing 4 KiB into a GPU behind the NIC's PCIe switch advance a few operations per pass on the core
    (a READ's max_rd_atomic slot is freed when its completion entry lands, which queues on the uplink among the other
    QP's responses: each pass settles about one round of slots); 64 B before them are solved in long blocks. auto
    hands the run over and says why."""
    lines: list[str] = []
    result = run_scenario(Scenario.model_validate(gpu_reads(qps=2, sizes=["64B", "4KiB"])), notice=lines.append)
    assert result.engine == "event" and "keeps only about" in result.fallback, lines

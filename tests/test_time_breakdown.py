"""Where a run's wall time went: the backend's step phases beside the harness's own intervals,
as fractions that add up; a backend that times no phases still runs and says "not reported".
The same runs' logs carry MLPerf's lowest-numerical-precision keys, which `check` holds to the
run's precision."""

from __future__ import annotations

import importlib.util
import json
import time

import pytest
import sqlalchemy as sa
import torch
from test_plugins import LinearCTCBackend, stand_in_workload
from test_results_db import documented_query

import benchbase
from benchbase.backend import STEP_STAGES
from benchbase.cli.reporter import time_breakdown_line
from benchbase.compliance.checker import check_log
from benchbase.compliance.keys import constants
from benchbase.harness import run_benchmark
from benchbase.harness.statistics import TrainingStatistics
from benchbase.harness.time_breakdown import time_breakdown
from benchbase.plugin_host.registry import collect_registry
from benchbase.report import load_groups
from benchbase.report.figures import write_figures
from benchbase.report.time_breakdown import time_breakdown_table
from benchbase.results_db import add_paths, database_url, open_for_reading, open_for_writing, time_table
from benchbase.specs import RunConfig
from benchbase.specs.result import STAGES_NOT_REPORTED, TIME_PARTS

TIMER_ERROR = 1e-3
"""Fractions are rounded to 1e-5 each: their sum is one within a few of those."""


class StagedLinearBackend(LinearCTCBackend):
    """The in-test backend, timing its eager step's phases with plain timers as the contract asks."""

    name = "staged-linear-ctc"

    def train_step(self, batch):
        start = time.perf_counter()
        features = torch.from_numpy(batch.features)
        copied = time.perf_counter()
        log_probs = torch.log_softmax(self.layer(features), dim=-1)
        loss = torch.nn.functional.ctc_loss(log_probs.transpose(0, 1), torch.from_numpy(batch.labels),
                                            torch.from_numpy(batch.feature_lengths),
                                            torch.from_numpy(batch.label_lengths), reduction="sum",
                                            zero_infinity=True) / batch.size
        forward = time.perf_counter()
        self.optimizer.zero_grad()
        loss.backward()
        backward = time.perf_counter()
        self.optimizer.step()
        self.stages = {"host_to_device": copied - start, "forward": forward - copied,
                       "backward": backward - forward, "optimizer": time.perf_counter() - backward}
        return float(loss.detach())

    def step_timings(self):
        return getattr(self, "stages", {})


class Backends:
    @benchbase.hookimpl
    def register_backends(self, register):
        register(LinearCTCBackend)
        register(StagedLinearBackend)


def run_result(pm, tmp_path, small_store, backend: str) -> dict:
    """A one-epoch ds2-mini run of ``backend`` into tmp_path/run; its result.json."""
    pm.register(Backends())
    registry = collect_registry(pm)
    workload = stand_in_workload(registry.workload("ds2-mini"), max_epochs=1)
    config = RunConfig(workload=workload, backend=backend, hardware=registry.profile("cpu"), seed=1,
                       out=tmp_path / "run", data=small_store)
    run_benchmark(config, pm, registry.backend(backend))
    return json.loads((tmp_path / "run" / "result.json").read_text())


def assert_adds_up(breakdown: dict) -> None:
    assert list(breakdown["fractions"]) == list(TIME_PARTS)
    assert sum(breakdown["fractions"].values()) == pytest.approx(1.0, abs=TIMER_ERROR)
    assert sum(breakdown["seconds"].values()) == pytest.approx(breakdown["wall_s"], abs=TIMER_ERROR * 10)
    assert all(value >= 0 for value in breakdown["seconds"].values())


def reported(tmp_path) -> tuple[list, list[str]]:
    """The report's time-breakdown row of the run at tmp_path/run, and the figures it draws."""
    groups = load_groups([tmp_path])
    figures = [path.name for path in write_figures(groups, tmp_path / "figures")]
    return time_breakdown_table(groups).rows[0], figures


def stored_row(tmp_path) -> list:
    """The run at tmp_path/run added to a results database, and its row of `benchbase results time`."""
    url = database_url(str(tmp_path / "results.sqlite"))
    with open_for_writing(url) as connection:
        add_paths(connection, [tmp_path / "run"])
    with open_for_reading(url) as connection:
        [row] = time_table(connection).rows
        [queried] = connection.execute(sa.text(documented_query(joining="time_parts"))).mappings()
    assert queried["evaluating"] == pytest.approx(row[5 + TIME_PARTS.index("evaluation")] / 100)
    return row


def test_a_backends_phases_and_the_harness_intervals_add_up_to_the_wall_time(pm, tmp_path, small_store):
    result = run_result(pm, tmp_path, small_store, "staged-linear-ctc")
    breakdown = result["time_breakdown"]
    assert breakdown["stages"] == "reported" and breakdown["wall_s"] == pytest.approx(result["run_seconds"])
    assert_adds_up(breakdown)
    assert all(breakdown["seconds"][stage] > 0 for stage in ("forward", "backward", "optimizer", "evaluation"))
    # The phases are inside the harness's step time, never more than it.
    assert sum(breakdown["seconds"][stage] for stage in STEP_STAGES) <= result["step_breakdown"]["step_s"] + 1e-3
    batches = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    staged = [line["stages"] for line in batches if line["kind"] == "batch"]
    assert staged and all(set(stages) == set(STEP_STAGES) for stages in staged)
    row, figures = reported(tmp_path)
    assert row[-1] == "reported" and sum(row[1:-1]) == pytest.approx(100, abs=0.1) and row[3] > 0  # forward
    assert "time-breakdown.png" in figures
    assert "forward" in time_breakdown_line(breakdown) and "not reported" not in time_breakdown_line(breakdown)
    stored = stored_row(tmp_path)
    assert stored[-4] == "reported" and stored[6] > 0  # forward
    assert sum(stored[5:-4]) == pytest.approx(100, abs=100 * TIMER_ERROR)


def test_a_backend_without_the_split_still_runs_and_says_not_reported(pm, tmp_path, small_store):
    result = run_result(pm, tmp_path, small_store, "linear-ctc")
    breakdown = result["time_breakdown"]
    assert result["status"] == "aborted" and breakdown["stages"] == STAGES_NOT_REPORTED
    assert_adds_up(breakdown)
    assert all(breakdown["seconds"][stage] == 0 for stage in STEP_STAGES)
    assert breakdown["seconds"]["step"] == pytest.approx(result["step_breakdown"]["step_s"], abs=1e-3)
    row, figures = reported(tmp_path)
    assert row[-1] == STAGES_NOT_REPORTED and "time-breakdown.png" in figures
    assert "(step phases not reported)" in time_breakdown_line(breakdown)
    stored = stored_row(tmp_path)
    assert stored[-4] == STAGES_NOT_REPORTED
    assert stored[-3] == pytest.approx(100 * result["compute"]["padding_fraction"])
    assert stored[-2:] == [None, None]  # the cpu profile states no clock to estimate a peak from
    assert sum(stored[5:-4]) == pytest.approx(100, abs=100 * TIMER_ERROR)
    # The same run's log: MLPerf's precision keys stated, and held to its fp32.
    log, workloads = tmp_path / "run" / "mllog.log", collect_registry(pm).workloads
    report = check_log(log, workloads=workloads)
    assert report.passed and "precision_keys" in {finding.rule for finding in report.findings}, report.failures
    linear = constants.LOWEST_NUMERICAL_PRECISION_IN_LINEAR
    assert _logged(log, linear) == "fp32" and _logged(log, constants.LOWEST_NUMERICAL_PRECISION_IN_COMM) == "fp32"
    _restate(log, linear, "bf16")
    failures = check_log(log, workloads=workloads).failures
    assert [failure.split(":")[0] for failure in failures] == ["precision_keys"] and "fp32" in failures[0]


def _logged(log, key: str):
    return next(json.loads(line.split(" ", 1)[1])["value"] for line in log.read_text().splitlines()
                if f'"{key}"' in line)


def _restate(log, key: str, value: str) -> None:
    """The log with ``key``'s value changed, as an edit after the run would leave it."""
    lines = []
    for line in log.read_text().splitlines():
        if f'"{key}"' in line:
            event = json.loads(line.split(" ", 1)[1])
            line = ":::MLLOG " + json.dumps({**event, "value": value})
        lines.append(line)
    log.write_text("\n".join(lines) + "\n")


def test_what_no_interval_covers_is_other_and_a_partial_split_says_so():
    statistics = TrainingStatistics(data_waits=[1.0, 1.0], step_seconds=[3.0, 3.0], evaluation_seconds=2.0,
                                    checkpoint_seconds=0.5)
    statistics.record_stages({"forward": 1.0, "backward": 1.5})
    breakdown = time_breakdown(statistics, wall_seconds=12.0)
    assert breakdown["stages"] == "reported on 1 of 2 steps"
    assert breakdown["seconds"] == {"data_wait": 2.0, "host_to_device": 0.0, "forward": 1.0, "backward": 1.5,
                                    "optimizer": 0.0, "step": 3.5, "evaluation": 2.0, "checkpoint": 0.5,
                                    "other": 1.5}
    assert breakdown["fractions"]["other"] == pytest.approx(1.5 / 12)
    assert time_breakdown(TrainingStatistics(), wall_seconds=5.0) == {}


@pytest.mark.skipif(importlib.util.find_spec("benchbase_torch_ds2") is None, reason="needs the torch backend")
def test_the_torch_backend_times_each_phase_of_its_eager_step():
    from benchbase_torch_ds2.backend import TorchBackend

    from benchbase.kit.data import load_kit_data

    data = load_kit_data()
    backend = TorchBackend()
    backend.build(data.context(seed=0))
    try:
        assert backend.step_timings() == {}  # no step yet
        step_from = time.perf_counter()
        backend.train_step(data.batches[0])
        step = time.perf_counter() - step_from
        timings = backend.step_timings()
    finally:
        backend.close()
    assert set(STEP_STAGES) <= set(timings)
    assert all(timings[stage] > 0 for stage in STEP_STAGES)
    assert sum(timings[stage] for stage in STEP_STAGES) <= step

"""The workload's compilation rule (tta.compilation): on the clock, the paper's rule and the
default; or before run_start, MLPerf's allowance, where the harness builds the model in init and
hands the backend the run's batch shapes to compile for (Backend.warm_up)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import run_benchbase
from test_plugins import LinearCTCBackend, ThirdPartyPlugin, stand_in_workload

from benchbase.compliance.checker import check_log
from benchbase.errors import BenchbaseError
from benchbase.harness import run_benchmark
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.specs import RunConfig

WARM_UP = "benchbase_warm_up"


class CountsItsWarmUps(LinearCTCBackend):
    """Records the shapes it was asked to compile for (a real backend would compile there)."""

    warmed: list = []

    def warm_up(self, shapes):
        CountsItsWarmUps.warmed = list(shapes)


class TrainsInItsWarmUp(LinearCTCBackend):
    """Compiles by training on zeros: the weights it starts the clock with are not build()'s."""

    def warm_up(self, shapes):
        with torch.no_grad():
            self.layer.weight += 0.01


def _registry_and_manager():
    manager = get_plugin_manager(load_entrypoints=False)
    manager.register(ThirdPartyPlugin())
    return manager, collect_registry(manager)


def _run(backend_class, small_store: Path, out: Path, compilation: str) -> Path:
    manager, registry = _registry_and_manager()
    base = registry.workload("ds2-mini")
    workload = stand_in_workload(base, max_epochs=2, tta=base.tta.model_copy(update={"compilation": compilation}))
    config = RunConfig(workload=workload, backend="linear-ctc", hardware=registry.profile("cpu"), seed=1, out=out,
                       data=small_store, final_evaluation=False)
    run_benchmark(config, manager, backend_class)
    return out


def _events(run: Path) -> list[dict]:
    return [json.loads(line.split(" ", 1)[1]) for line in (run / "mllog.log").read_text().splitlines()]


@pytest.fixture(scope="module")
def warmed_run(tmp_path_factory, small_store) -> Path:
    return _run(CountsItsWarmUps, small_store, tmp_path_factory.mktemp("warm-up") / "run", "before_run_start")


def test_before_run_start_builds_and_warms_up_in_init_and_the_log_passes(warmed_run):
    keys = [event["key"] for event in _events(warmed_run)]
    assert keys.index("init_start") < keys.index(WARM_UP) < keys.index("init_stop") < keys.index("run_start")
    warm_up = next(event for event in _events(warmed_run) if event["key"] == WARM_UP)["value"]
    startup = next(event for event in _events(warmed_run) if event["key"] == "benchbase_startup")["value"]
    assert warm_up["shapes"] == len(CountsItsWarmUps.warmed) > 1 and startup["build_s"] == 0.0
    # the shapes of both epochs' training batches (the global batch's rows) and of the dev batches
    _, registry = _registry_and_manager()
    rows = {shape.rows for shape in CountsItsWarmUps.warmed}
    assert registry.profile("cpu").pipeline.global_batch in rows and len(rows) > 1, rows
    report = check_log(warmed_run / "mllog.log", workloads=registry.workloads)
    assert report.passed, report.failures


def test_a_log_without_its_warm_up_fails_the_compilation_rule(warmed_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(warmed_run, run)
    kept = [event for event in _events(run) if event["key"] != WARM_UP]
    (run / "mllog.log").write_text("".join(f":::MLLOG {json.dumps(event)}\n" for event in kept))
    _, registry = _registry_and_manager()
    failures = check_log(run / "mllog.log", workloads=registry.workloads).failures
    assert any(line.startswith("compilation: ") and "holds no benchbase_warm_up" in line for line in failures), failures


def test_on_the_clock_no_warm_up_is_called_and_a_planted_one_fails(small_store, tmp_path):
    CountsItsWarmUps.warmed = []
    run = _run(CountsItsWarmUps, small_store, tmp_path / "run", "on_clock")
    assert CountsItsWarmUps.warmed == [] and WARM_UP not in [event["key"] for event in _events(run)]
    events = _events(run)
    at = [event["key"] for event in events].index("init_start") + 1
    events.insert(at, {**events[at - 1], "key": WARM_UP, "event_type": "POINT_IN_TIME",
                       "value": {"build_s": 0.1, "warm_up_s": 1.0, "shapes": 3}})
    (run / "mllog.log").write_text("".join(f":::MLLOG {json.dumps(event)}\n" for event in events))
    _, registry = _registry_and_manager()
    failures = check_log(run / "mllog.log", workloads=registry.workloads).failures
    assert any(line.startswith("compilation: ") and "puts them on the clock" in line for line in failures), failures


def test_a_warm_up_that_changes_the_weights_is_refused_before_the_clock(small_store, tmp_path):
    with pytest.raises(BenchbaseError, match=r"backend 'linear-ctc': warm_up\(\) changed the model \(weight"):
        _run(TrainsInItsWarmUp, small_store, tmp_path / "run", "before_run_start")
    assert not (tmp_path / "run" / "mllog.log").exists()  # refused in init: nothing was measured


@pytest.mark.slow
def test_jax_compiles_before_run_start_where_the_workload_says_so(small_store, tmp_path):
    """The JAX backend's warm_up compiles every program of the run in init: its first step on the
    clock is then no slower than its others."""
    out = tmp_path / "run"
    ran = run_benchbase("run", "--workload", "ds2-mini", "--backend", "jax", "--hw", "cpu", "--data", str(small_store),
                        "--out", str(out), "--max-epochs", "1", "--no-final-eval",
                        "--set", "workload.tta.compilation=before_run_start",
                        # a cache would let the on-the-clock compilation be a lookup: none here
                        env={"JAX_COMPILATION_CACHE_DIR": "", "JAX_ENABLE_COMPILATION_CACHE": "false"}, timeout=900)
    assert ran.returncode in (0, 3), ran.stderr
    warm_up = next(event for event in _events(out) if event["key"] == WARM_UP)["value"]
    assert warm_up["shapes"] >= 2 and warm_up["warm_up_s"] > 0
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    step_seconds = [row["step_s"] for row in steps if row.get("kind") == "batch"]
    assert step_seconds[0] < 3 * float(np.median(step_seconds[1:])), step_seconds
    checked = run_benchbase("check", str(out))
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.slow
def test_every_rank_builds_before_the_clock_in_a_two_process_run(small_store, tmp_path):
    """torchrun's ranks: each builds (DDP's construction is a collective) before the barrier that
    starts the clock; rank 0 logs the warm-up in init."""
    out = tmp_path / "run"
    ran = run_benchbase("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu2", "--data",
                        str(small_store), "--out", str(out), "--max-epochs", "1", "--no-final-eval",
                        "--set", "workload.tta.compilation=before_run_start", timeout=600)
    assert ran.returncode in (0, 3), ran.stderr
    keys = [event["key"] for event in _events(out)]
    assert keys.count(WARM_UP) == 1 and keys.index(WARM_UP) < keys.index("init_stop") < keys.index("run_start")
    checked = run_benchbase("check", str(out))
    assert checked.returncode == 0, checked.stdout + checked.stderr

"""Training strategies (benchbase.specs.strategy, the torch backend's ``strategies``): how they are
chosen, refused, logged and checked, and that each combines the learners' work as it says.

The numerical tests train real processes under torch's launcher (tests/workers/strategies.py):
local SGD that averages the models after every step is synchronous SGD for an optimizer whose
update is linear in the gradient, and ADPSGD's gossip moves each learner halfway toward its peer.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
from cli_helpers import benchbase_in_process, run_benchbase
from pydantic import Field

import benchbase
from benchbase.errors import InputError
from benchbase.numerics.tolerances import BOTH_SIDES, FLOAT32_UNIT_ROUNDOFF, after_steps
from benchbase.plugin_host.registry import collect_registry
from benchbase.specs import RunConfig
from benchbase.specs.strategy import (
    LocalSGDSpec,
    StrategyDefinition,
    StrategySpec,
    SyncSpec,
    UnknownStrategySpec,
    validate_strategy,
)

WORKERS = Path(__file__).parent / "workers"


# --- choosing a strategy, before the clock ------------------------------------------------------


def _dry_run(capsys, *extra: str) -> tuple[int, str, str]:
    return benchbase_in_process(capsys, "run", "--workload", "ds2-mini", "--backend", "torch", "--dry-run", *extra)


def test_a_strategy_other_than_sync_makes_the_run_open_and_says_why(capsys):
    code, out, err = _dry_run(capsys, "--hw", "cpu2", "--strategy", "local_sgd", "--set", "strategy.period=8")
    assert code == 0, err
    assert "open" in out and "strategy: 'sync' -> 'local_sgd'" in out


@pytest.mark.parametrize(("extra", "message"), [
    (("--hw", "cpu2", "--strategy", "gossip"), "unknown strategy 'gossip'; available: adpsgd, bf16_compress"),
    (("--hw", "cpu", "--strategy", "adpsgd"),
     "training strategy 'adpsgd' needs at least 2 learners, and this run has 1; pass --devices 2 or more"),
    (("--hw", "cpu2", "--strategy", "local_sgd", "--set", "strategy.period=0"),
     "strategy with --set overrides: period: Input should be greater than or equal to 1"),
    (("--hw", "cpu2", "--strategy", "sync", "--set", "strategy.period=2"),
     "--set strategy.period: training strategy 'sync' (the default) has no parameters; --strategy NAME selects "
     "one with period: hierarchical or local_sgd"),
    # without --strategy, the refusal names the strategy the run would train with
    (("--hw", "cpu", "--set", "strategy.period=8"),
     "--set strategy.period: training strategy 'sync' (the default) has no parameters; --strategy NAME selects "
     "one with period: hierarchical or local_sgd"),
    (("--hw", "cpu2", "--strategy", "local_sgd", "--set", "strategy.periode=2"),
     "--set strategy.periode: training strategy 'local_sgd' has no field 'periode' (its parameters: period, "
     "warmup_steps)\n"),
])
def test_a_strategy_that_cannot_run_is_refused_in_one_line(capsys, extra, message):
    code, out, err = _dry_run(capsys, *extra)
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_a_backend_that_does_not_carry_a_strategy_out_refuses_it_before_the_clock(capsys):
    code, _, err = benchbase_in_process(capsys, "run", "--workload", "ds2-mini", "--backend", "tf", "--hw", "cpu2",
                                        "--strategy", "powersgd", "--dry-run")
    assert code == 2 and "backend 'tf' does not implement training strategy 'powersgd' (it declares sync)" in err


class StalenessBoundedSpec(StrategySpec):
    name: Literal["bounded-async"] = "bounded-async"
    staleness: int = Field(2, ge=1, le=64, description="Steps a learner may run ahead.")


class ThirdPartyStrategy:
    @benchbase.hookimpl
    def register_strategies(self, register):
        register(StrategyDefinition("bounded-async", StalenessBoundedSpec, "a plugin's own strategy"))


def test_a_plugins_strategy_registers_reads_back_and_is_refused_by_a_backend_that_does_not_declare_it():
    from benchbase.cli.run_plan import RunRequest, resolve_run
    from benchbase.plugin_host import get_plugin_manager

    pm = get_plugin_manager()  # the installed backends too
    pm.register(ThirdPartyStrategy())
    registry = collect_registry(pm)
    assert registry.strategy("bounded-async").spec is StalenessBoundedSpec and not pm.failures
    assert validate_strategy({"name": "bounded-async", "staleness": 3}) == StalenessBoundedSpec(staleness=3)
    with pytest.raises(InputError, match="backend 'torch' does not implement training strategy 'bounded-async'"):
        resolve_run(RunRequest(workload="ds2-mini", backend="torch", hardware="cpu2", strategy="bounded-async"),
                    registry)


def test_config_json_keeps_the_strategy_and_reads_one_it_does_not_know(tmp_path):
    config = RunConfig.model_validate({**_minimal_config(tmp_path), "strategy": {"name": "local_sgd", "period": 3}})
    assert config.strategy == LocalSGDSpec(period=3)
    again = RunConfig.model_validate_json(config.model_dump_json())
    assert again.strategy == LocalSGDSpec(period=3)
    assert RunConfig.model_validate(_minimal_config(tmp_path)).strategy == SyncSpec()  # written before strategies
    foreign = validate_strategy({"name": "a-plugins-own", "staleness": 4})
    assert isinstance(foreign, UnknownStrategySpec) and foreign.parameters() == {"staleness": 4}


def _minimal_config(tmp_path: Path) -> dict:
    from benchbase.plugin_host.builtins.hardware_profiles import profiles_directory
    from benchbase.plugin_host.builtins.workloads import builtin_workload
    from benchbase.specs import HardwareProfile
    from benchbase.specs.yaml_files import load_spec_file

    return {"workload": builtin_workload("ds2-mini").model_dump(mode="json"), "backend": "torch",
            "hardware": load_spec_file(HardwareProfile, profiles_directory() / "cpu2.yaml").model_dump(mode="json"),
            "out": str(tmp_path / "run"), "data": str(tmp_path / "store")}


def test_local_sgd_parameters_are_bounded():
    with pytest.raises(ValueError):
        LocalSGDSpec(period=0)
    with pytest.raises(InputError):
        from benchbase.specs.overrides import apply_overrides

        apply_overrides(LocalSGDSpec(), [("warmup_steps", -1)], "strategy")


# --- what the strategies compute (real processes) -----------------------------------------------


def _launch(processes: int, *arguments: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc-per-node={processes}", str(WORKERS / "strategies.py"), *arguments],
                          capture_output=True, text=True, timeout=300, env=environment)


ROUNDINGS_PER_STEP = 4
"""Where sync and local SGD of period 1 round differently in one step, each at most half an ulp of
a weight: sync rounds the averaged gradient's update once; local SGD rounds each learner's update
and then their average (two); and the momentum buffers, updated from different sums, once more
(scaled down by the learning rate, counted whole)."""


@pytest.mark.slow
@pytest.mark.numerics
def test_local_sgd_averaging_every_step_trains_as_sync_does_to_rounding(small_store, tmp_path):
    """SGD with momentum is linear in the gradient: averaging the learners' models after each of
    their own steps is the step on the averaged gradient, up to rounding. The bound is the error
    model's: a few roundings of the weights per step, compounded over the steps (``after_steps``).
    Measured (12 steps, 2 learners): period 1 drifts 3e-7 of |x| from sync; period 2, which is a
    different algorithm, 2e-3, far outside the bound, so the bound can tell them apart."""
    steps, weights = 12, {}
    for label, strategy in (("sync", {"name": "sync"}), ("period-1", {"name": "local_sgd", "period": 1}),
                            ("period-2", {"name": "local_sgd", "period": 2})):
        out = tmp_path / label
        out.mkdir()
        finished = _launch(2, "train", str(small_store), str(out), json.dumps(strategy), str(steps))
        assert finished.returncode == 0, finished.stderr[-3000:]
        weights[label] = np.load(out / "weights.npz")
    initial = np.load(tmp_path / "sync" / "initial.npz")
    sync = weights["sync"]

    def distance(a, b) -> float:
        return float(np.sqrt(sum(np.sum((a[name].astype(np.float64) - b[name]) ** 2) for name in sync.files)))

    size = float(np.sqrt(sum(np.sum(sync[name].astype(np.float64) ** 2) for name in sync.files)))
    assert distance(sync, initial) > 0.01 * size  # training moved the weights
    bound = after_steps(BOTH_SIDES * ROUNDINGS_PER_STEP * FLOAT32_UNIT_ROUNDOFF, steps - 1) * size
    assert distance(weights["period-1"], sync) <= bound, (distance(weights["period-1"], sync), bound)
    assert distance(weights["period-2"], sync) > 10 * bound


@pytest.mark.slow
@pytest.mark.parametrize("peer", ["ring", "random"])
def test_adpsgd_gossip_moves_each_learner_halfway_to_its_peer_and_keeps_the_mean(tmp_path, peer):
    """Three learners holding 0, 1 and 2 exchange twice; learner i receives from i - s (mod 3),
    s = 1 on the ring, drawn from the seed otherwise (the worker's seed 7). The exchange only mixes:
    the mean is unchanged, exactly (halves of small integers are exact in float32)."""
    finished = _launch(3, "gossip", str(tmp_path), peer)
    assert finished.returncode == 0, finished.stderr[-3000:]
    held = [json.loads((tmp_path / f"gossip-{rank}.json").read_text()) for rank in range(3)]
    expected = [0.0, 1.0, 2.0]
    shifts = random.Random(7)
    for _ in range(2):
        shift = shifts.randrange(1, 3) if peer == "random" else 1
        expected = [(expected[rank] + expected[(rank - shift) % 3]) / 2 for rank in range(3)]
    assert [state["first"] for state in held] == [[value] * 5 for value in expected]
    assert all(state["second"] == [-1.0] * 6 for state in held)
    assert sum(expected) == 3.0
    assert all(state["bytes"] == 2 * 11 * 4 for state in held)  # two sends of 11 float32 weights


# --- a run under a strategy, end to end ---------------------------------------------------------


@pytest.fixture(scope="module")
def adpsgd_run(tmp_path_factory, small_store):
    out = tmp_path_factory.mktemp("adpsgd") / "run"
    finished = run_benchbase("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu2", "--data",
                             str(small_store), "--out", str(out), "--strategy", "adpsgd", "--set",
                             "strategy.peer=random", "--max-epochs", "1", "--no-final-eval", timeout=600)
    return out, finished


@pytest.mark.slow
def test_an_adpsgd_run_logs_its_strategy_and_communication_and_passes_check_as_open(adpsgd_run):
    out, finished = adpsgd_run
    assert finished.returncode == 3, finished.stderr[-3000:]  # aborted at max_epochs: a status
    events = _events(out / "mllog.log")
    assert events["submission_division"][0]["value"] == "open"
    assert events["benchbase_strategy"][0]["value"] == {"name": "adpsgd", "parameters": {"peer": "random"},
                                                       "evaluated": "learner 0"}
    parameters = 4 * json.loads((out / "result.json").read_text())["parameter_count"]  # float32 bytes
    communicated = events["benchbase_communication"][0]["value"]
    assert communicated["bytes_per_step"] == parameters  # one model sent per step
    assert communicated["steps"] > 0 and communicated["seconds_per_step"] > 0
    batches = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"batch"' in line]
    assert all(batch["comm_bytes"] == parameters for batch in batches)
    checked = run_benchbase("check", str(out))
    assert checked.returncode == 0, checked.stdout[-3000:]


@pytest.mark.slow
def test_verify_rebuilds_a_strategy_runs_backend_as_one_process_that_predicts(adpsgd_run):
    out, _ = adpsgd_run
    verified = run_benchbase("verify", str(out), "--with-backend")
    assert verified.returncode == 0, verified.stderr[-2000:]
    assert "verified against the last evaluation" in verified.stdout


@pytest.mark.slow
def test_a_closed_run_with_another_strategy_fails_check(adpsgd_run, tmp_path):
    """The log and config.json doctored to claim the closed division: the strategy gives it away;
    a config.json that states another strategy than the log does fails too."""
    out, _ = adpsgd_run
    closed = tmp_path / "closed"
    _copy_run(out, closed)
    _rewrite_log(closed / "mllog.log", {"submission_division": "closed", "benchbase_open_changes": []})
    config = json.loads((closed / "config.json").read_text())
    (closed / "config.json").write_text(json.dumps({**config, "division": "closed", "open_changes": []}))
    checked = run_benchbase("check", str(closed))
    assert checked.returncode != 0
    assert "claims the closed division, but" in checked.stdout and "trains with strategy 'adpsgd'" in checked.stdout

    disagreeing = tmp_path / "disagreeing"
    _copy_run(out, disagreeing)
    config = json.loads((disagreeing / "config.json").read_text())
    (disagreeing / "config.json").write_text(json.dumps({**config, "strategy": {"name": "local_sgd", "period": 2}}))
    checked = run_benchbase("check", str(disagreeing))
    assert checked.returncode != 0 and "states training strategy 'local_sgd'" in checked.stdout, checked.stdout


def _events(log: Path) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for line in log.read_text().splitlines():
        event = json.loads(line.partition(" ")[2])
        found.setdefault(event["key"], []).append(event)
    return found


def _copy_run(source: Path, destination: Path) -> None:
    import shutil

    shutil.copytree(source, destination)


def _rewrite_log(log: Path, values: dict) -> None:
    lines = []
    for line in log.read_text().splitlines():
        prefix, _, body = line.partition(" ")
        event = json.loads(body)
        if event["key"] in values:
            event["value"] = values[event["key"]]
        lines.append(f"{prefix} {json.dumps(event)}")
    log.write_text("\n".join(lines) + "\n")

"""`benchbase sweep`: the spec, the plan, the folder's decisions, and real sweeps of ds2-mini.

The end-to-end sweeps train ds2-mini for an epoch or two on the small corpus with a target every
run reaches (CER 100), so that each run is seconds of training; what is tested is the sweep:
its layout, the groups `benchbase score` sees, skipping, and resuming after a SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from cli_helpers import run_benchbase

from benchbase.errors import InputError
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.sweeps.folder import (
    SweepRecord,
    abandon,
    check_same_runs,
    configuration_folders,
    next_action,
)
from benchbase.sweeps.spec import SweepSpec, check_resolvable, load_sweep, plan_sweep

GRID = {"name": "grid", "workload": "ds2-mini", "backends": ["torch", "tf"], "profiles": ["cpu"], "seeds": [0, 1],
        "variants": [{"name": "r1", "set": ["hardware.pipeline.readers=1"]},
                     {"name": "r2", "set": ["hardware.pipeline.readers=2"]}],
        "set": ["workload.tta.window=1"], "max_epochs": 1}


def _write(path: Path, spec: dict) -> Path:
    path.write_text(yaml.safe_dump(spec))
    return path


def _record(sweep_dir: Path) -> dict:
    return json.loads((sweep_dir / "sweep.json").read_text())


def _statuses(sweep_dir: Path) -> dict[str, tuple[str, int | None]]:
    return {entry["run"]: (entry["status"], entry["exit_code"]) for entry in _record(sweep_dir)["runs"]}


# --- the spec -------------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "message"), [
    ({"bogus": 1}, "bogus: Extra inputs are not permitted"),
    ({"name": "../up"}, "name: Value error, sweep name '../up' cannot name a folder"),
    ({"backends": []}, "backends: List should have at least 1 item"),
    ({"seeds": [1, 1]}, "seeds: Value error, seeds repeat: 1"),
    ({"variants": [{"name": "a"}, {"set": []}]}, "variants: with several variants, each needs a name"),
    ({"variants": [{"name": "a"}, {"name": "a"}]}, "variant names repeat: a"),
    ({"set": ["batch=3"]}, "set: Value error, --set 'batch=3': expected workload.PATH=VALUE"),
    ({"targets": ["cer40"]}, "targets: Value error, target 'cer40': expected METRIC=VALUE"),
    ({"precision": "fp64"}, "precision: Value error, precision 'fp64' is not one of"),
    ({"profiles": ["cpu", "hardware_profiles/cpu.yaml"]}, "profile folder names repeat: cpu"),
])
def test_a_bad_sweep_file_is_a_one_line_error_naming_it(tmp_path, change, message):
    path = _write(tmp_path / "sweep.yaml", {**GRID, **change})
    with pytest.raises(InputError) as raised:
        load_sweep(path)
    assert str(raised.value).startswith(f"{path}: ") and "\n" not in str(raised.value)
    assert message in str(raised.value)


def test_the_plan_is_the_grid_each_configurations_seeds_together():
    plan = plan_sweep(SweepSpec.model_validate(GRID))
    assert [run.name for run in plan] == [f"{backend}-cpu-{variant}/seed-{seed}" for backend in ("torch", "tf")
                                          for variant in ("r1", "r2") for seed in (0, 1)]
    run = plan[2]
    # The variant's overrides come after the sweep's own, so that a variant can override them.
    assert run.options == ("--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu", "--seed", "0",
                           "--max-epochs", "1", "--set", "workload.tta.window=1",
                           "--set", "hardware.pipeline.readers=2")
    assert run.folder(Path("S")) == Path("S/torch-cpu-r2/seed-0")
    assert run.log(Path("S")) == Path("S/torch-cpu-r2/seed-0.log")  # beside the run folder, not in it


EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("sweep-*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_every_example_sweep_plans_and_its_overrides_fit_the_registered_specs(path):
    # The installed backends too (entry points), as `benchbase sweep` resolves them.
    registry = collect_registry(get_plugin_manager())
    spec = load_sweep(path)
    assert plan_sweep(spec)
    check_resolvable(spec, path, registry)


def test_a_variant_trains_with_its_strategy_and_an_unknown_one_is_refused_naming_the_file(tmp_path):
    grid = {**GRID, "backends": ["torch"], "profiles": ["cpu2"],
            "variants": [{"name": "sync"}, {"name": "local", "strategy": "local_sgd", "set": ["strategy.period=8"]}]}
    plan = plan_sweep(SweepSpec.model_validate(grid))
    assert "--strategy" not in plan[0].options
    assert plan[-1].options[-4:] == ("--set", "strategy.period=8", "--strategy", "local_sgd")
    registry = collect_registry(get_plugin_manager())
    check_resolvable(SweepSpec.model_validate(grid), tmp_path / "grid.yaml", registry)
    for variant, message in (({"name": "x", "strategy": "gossip"}, "variant x: unknown strategy 'gossip'"),
                             ({"name": "x", "strategy": "local_sgd", "set": ["strategy.periode=2"]},
                              "training strategy 'local_sgd' has no field 'periode'")):
        with pytest.raises(InputError, match=message):
            check_resolvable(SweepSpec.model_validate({**grid, "variants": [variant]}), tmp_path / "g.yaml", registry)


def test_one_unnamed_variant_by_default():
    spec = SweepSpec.model_validate({key: value for key, value in GRID.items() if key != "variants"})
    assert [run.configuration for run in plan_sweep(spec)] == ["torch-cpu"] * 2 + ["tf-cpu"] * 2


def test_dry_run_lists_the_grid_and_touches_nothing(tmp_path):
    out = tmp_path / "sweep"
    shown = run_benchbase("sweep", str(_write(tmp_path / "grid.yaml", GRID)), "--out", str(out), "--dry-run")
    assert shown.returncode == 0, shown.stderr
    said = " ".join(shown.stdout.split())
    assert "sweep grid: 8 runs of ds2-mini" in said
    for run in plan_sweep(SweepSpec.model_validate(GRID)):
        assert f"{run.name} │ start" in said
    assert "variant r1: hardware.pipeline.readers=1" in said
    assert not out.exists()


def test_an_unknown_backend_or_override_is_refused_before_any_run(tmp_path):
    for change, message in (({"backends": ["torhc"]}, "unknown backend 'torhc'"),
                            ({"set": ["workload.nope=1"]}, "workload has no field 'nope'")):
        path = _write(tmp_path / "sweep.yaml", {**GRID, **change})
        refused = run_benchbase("sweep", str(path), "--out", str(tmp_path / "out"))
        assert refused.returncode == 2
        [line] = refused.stderr.strip().splitlines()
        assert line.startswith(f"benchbase: error: {path}: ") and message in line
        assert not (tmp_path / "out").exists()


# --- the folder -----------------------------------------------------------------------------


def _fake_run(folder: Path, *files: str) -> Path:
    folder.mkdir(parents=True)
    for name in files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("{}")
    return folder


def test_what_a_run_needs_next_follows_from_its_folder(tmp_path):
    assert next_action(tmp_path / "absent") == "start"
    (tmp_path / "empty").mkdir()
    assert next_action(tmp_path / "empty") == "start"
    assert next_action(_fake_run(tmp_path / "finished", "config.json", "result.json")) == "skip"
    assert next_action(_fake_run(tmp_path / "checkpointed", "config.json", "checkpoints/batch-0000003.ckpt",
                                 "checkpoints/batch-0000003.ckpt.json")) == "resume"
    # Killed before its first checkpoint, or while writing it (no sidecar yet): nothing to go on from.
    assert next_action(_fake_run(tmp_path / "early", "config.json", "mllog.log")) == "restart"
    assert next_action(_fake_run(tmp_path / "torn", "config.json", "checkpoints/batch-0000003.ckpt")) == "restart"


def test_a_run_moved_aside_leaves_the_configuration_and_every_group(tmp_path):
    [run] = [run for run in plan_sweep(SweepSpec.model_validate(GRID)) if run.name == "torch-cpu-r1/seed-1"]
    _fake_run(run.folder(tmp_path), "config.json", "mllog.log")
    _fake_run(run.folder(tmp_path).with_name("seed-0"), "config.json", "result.json", "mllog.log")
    moved = abandon(tmp_path, run)
    assert not run.folder(tmp_path).exists() and (moved / "mllog.log").is_file()
    assert moved.parent == tmp_path / ".abandoned" / "torch-cpu-r1"
    (tmp_path / "sweep.json").write_text(json.dumps({"runs": [{"run": run.name, "configuration": run.configuration}]}))
    assert configuration_folders(tmp_path) == [tmp_path / "torch-cpu-r1"]
    assert configuration_folders(tmp_path / "torch-cpu-r1") is None  # not a sweep folder


def test_a_sweep_file_changed_under_finished_runs_is_refused(tmp_path):
    spec = SweepSpec.model_validate(GRID)
    plan = plan_sweep(spec)
    SweepRecord.planned(tmp_path, spec, Path("grid.yaml"), plan, None).save()
    _fake_run(plan[0].folder(tmp_path), "config.json", "result.json")
    check_same_runs(tmp_path, plan, SweepRecord.read(tmp_path))  # the same plan goes on
    # More seeds add runs: the finished ones are still what the file asks for.
    check_same_runs(tmp_path, plan_sweep(SweepSpec.model_validate({**GRID, "seeds": [0, 1, 2]})),
                    SweepRecord.read(tmp_path))
    changed = plan_sweep(SweepSpec.model_validate({**GRID, "max_epochs": 2}))
    with pytest.raises(InputError) as raised:
        check_same_runs(tmp_path, changed, SweepRecord.read(tmp_path))
    assert str(raised.value).startswith(f"{plan[0].folder(tmp_path)}: made with other options")
    assert "(then --max-epochs 1, now --max-epochs 2)" in str(raised.value) and "\n" not in str(raised.value)


def test_a_folder_that_is_not_a_sweep_is_refused(tmp_path):
    (tmp_path / "something").write_text("x")
    with pytest.raises(InputError, match="holds no sweep.json; choose another --out"):
        check_same_runs(tmp_path, plan_sweep(SweepSpec.model_validate(GRID)), None)


# --- real sweeps ----------------------------------------------------------------------------


def _small_sweep(store: Path, **changes) -> dict:
    """ds2-mini on torch over the small corpus; every run reaches CER 100 at its first evaluation."""
    return {"name": "small", "workload": "ds2-mini", "backends": ["torch"], "profiles": ["cpu"], "seeds": [0, 1],
            "set": ["workload.tta.window=1"], "targets": ["paper_cer=100"], "max_epochs": 1, "no_final_eval": True,
            "data": str(store), **changes}


BATCH_SIZES = [{"name": f"batch{size}",
                "set": [f"hardware.pipeline.global_batch={size}", f"hardware.pipeline.batch_per_device={size}"]}
               for size in (16, 32)]


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory, small_store) -> tuple[Path, Path, subprocess.CompletedProcess]:
    root = tmp_path_factory.mktemp("sweep")
    path = _write(root / "batch-sizes.yaml", _small_sweep(small_store, variants=BATCH_SIZES))
    started = time.monotonic()
    finished = run_benchbase("sweep", str(path), "--out", str(root / "out"), timeout=600)
    print(f"2x2 sweep: {time.monotonic() - started:.0f} s")
    return path, root / "out", finished


@pytest.mark.slow
def test_a_sweep_runs_its_grid_into_one_folder(finished_sweep):
    _, out, finished = finished_sweep
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    names = [f"torch-cpu-batch{size}/seed-{seed}" for size in (16, 32) for seed in (0, 1)]
    assert _statuses(out) == {name: ("success", 0) for name in names}
    assert _record(out)["state"] == "finished"
    for name in names:
        config = json.loads((out / name / "config.json").read_text())
        assert config["seed"] == int(name[-1]) and config["hardware"]["pipeline"]["global_batch"] == int(name[15:17])
        assert (out / f"{name}.log").read_text().count("=== benchbase run --workload ds2-mini") == 1
    assert sorted(path.name for path in out.iterdir()) == [".lock", "sweep.json", "torch-cpu-batch16",
                                                          "torch-cpu-batch32"]


@pytest.mark.slow
def test_score_sees_one_group_per_configuration_with_its_seeds(finished_sweep):
    _, out, _ = finished_sweep
    groups = configuration_folders(out)
    assert groups == [out / "torch-cpu-batch16", out / "torch-cpu-batch32"]
    scored = run_benchbase("score", "--json", *map(str, groups))
    assert scored.returncode == 0, scored.stderr
    assert {group: score["CER 100"]["runs"] for group, score in json.loads(scored.stdout).items()} == {
        "torch-cpu-batch16": 2, "torch-cpu-batch32": 2}


@pytest.mark.slow
def test_the_sweep_folder_reports_as_one_experiment(finished_sweep, tmp_path):
    _, out, _ = finished_sweep
    scored = run_benchbase("score", "--json", str(out))
    assert scored.returncode == 0, scored.stderr
    scores = json.loads(scored.stdout)
    assert sorted(scores) == ["torch-cpu-batch16", "torch-cpu-batch32"]
    assert all(group["CER 100"]["runs"] == 2 and "coefficient_of_variation" in group["CER 100"]
               for group in scores.values())
    reported = run_benchbase("report", str(out), "--out", str(tmp_path / "report"))
    assert reported.returncode == 0, reported.stderr[-2000:]
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "the paper's Table 6" in markdown and "CV %" in markdown
    # Figure 10 compares groups at the same global batch; batch16 and batch32 share none, so it is left out.
    assert not (tmp_path / "report" / "figures" / "throughput-same-batch.png").exists()
    assert (tmp_path / "report" / "report.html").is_file()
    # `check` reads the sweep's folder as score and report do: every run's log, against the default rule set.
    checked = run_benchbase("check", str(out))
    assert checked.returncode == 0, checked.stdout[-2000:]
    assert "4/4 log(s) pass rule set 1.9" in " ".join(checked.stdout.split())


@pytest.mark.slow
def test_running_a_finished_sweep_again_skips_every_run(finished_sweep):
    path, out, _ = finished_sweep
    before = _record(out)["runs"]
    again = run_benchbase("sweep", str(path), "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert " ".join(again.stdout.split()).count("done (success)") == 4
    assert [entry["attempts"] for entry in _record(out)["runs"]] == [entry["attempts"] for entry in before]


def _wait_for(condition, process: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, process.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_sweep_stopped_by_sigterm_goes_on_where_it_stopped(tmp_path, small_store):
    # Two evaluations to reach the target: the second run is still training when it is stopped.
    spec = _small_sweep(small_store, max_epochs=2, checkpoint_every=1, set=["workload.tta.window=2"])
    path, out = _write(tmp_path / "sweep.yaml", spec), tmp_path / "out"
    sweep = subprocess.Popen([sys.executable, "-m", "benchbase", "sweep", str(path), "--out", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    second = out / "torch-cpu" / "seed-1" / "checkpoints"
    _wait_for(lambda: any(second.glob("*.ckpt.json")), sweep)
    processes = psutil.Process(sweep.pid).children(recursive=True)
    os.killpg(sweep.pid, signal.SIGTERM)  # the sweep's process group, as a scheduler stops a job
    output, _ = sweep.communicate(timeout=120)
    assert sweep.returncode == 143, output[-3000:]
    assert output.strip().splitlines()[-1] == ("benchbase: error: sweep interrupted (SIGTERM) at torch-cpu/seed-1; "
                                               f"to go on, run it again: benchbase sweep {path} --out {out}")
    _, alive = psutil.wait_procs(processes, timeout=10)
    assert not alive, [process.cmdline() for process in alive]
    assert _statuses(out) == {"torch-cpu/seed-0": ("success", 0), "torch-cpu/seed-1": ("interrupted", 143)}
    assert _record(out)["state"] == "interrupted" and _record(out)["stopped_at"] == "torch-cpu/seed-1"
    assert "run_stop" in (out / "torch-cpu" / "seed-1" / "mllog.log").read_text()  # it stopped in order

    resumed = run_benchbase("sweep", str(path), "--out", str(out), timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    [entry] = [entry for entry in _record(out)["runs"] if entry["run"] == "torch-cpu/seed-1"]
    assert [(attempt["action"], attempt["exit_code"]) for attempt in entry["attempts"]] == [("start", 143),
                                                                                            ("resume", 0)]
    result = json.loads((out / "torch-cpu" / "seed-1" / "result.json").read_text())
    assert result["status"] == "success" and len(result["resumes"]) == 1


@pytest.mark.slow
def test_a_failing_run_is_recorded_and_the_sweep_goes_on(tmp_path, small_store):
    # A global batch larger than the training split: each run refuses it (exit 2) before training.
    huge = [{"name": "huge", "set": ["hardware.pipeline.global_batch=60000",
                                     "hardware.pipeline.batch_per_device=60000"]}]
    path = _write(tmp_path / "sweep.yaml", _small_sweep(small_store, variants=huge))
    failed = run_benchbase("sweep", str(path), "--out", str(tmp_path / "out"), timeout=300)
    assert failed.returncode == 1
    assert _statuses(tmp_path / "out") == {"torch-cpu-huge/seed-0": ("failed", 2),
                                           "torch-cpu-huge/seed-1": ("failed", 2)}
    assert failed.stderr.strip().startswith("benchbase: error: 2 of 2 runs did not finish: torch-cpu-huge/seed-0")
    assert "fewer than one global batch" in (tmp_path / "out" / "torch-cpu-huge" / "seed-1.log").read_text()


# --- the dry run's checks, the file's documentation, the organization -----------------------


def _gpus() -> int:
    import torch

    return torch.cuda.device_count()


def test_a_dry_run_names_the_runs_that_run_would_refuse(tmp_path):
    profiles = ["cpu", "sys1"] if _gpus() < 4 else ["cpu"]
    spec = {"name": "refusals", "workload": "ds2-mini", "backends": ["torch"], "profiles": profiles, "seeds": [0],
            "variants": [{"name": "fp32"}, {"name": "fp16", "set": ["workload.model.precision=fp16"]}]}
    out = tmp_path / "out"
    shown = run_benchbase("sweep", str(_write(tmp_path / "refusals.yaml", spec)), "--out", str(out), "--dry-run",
                          env={"COLUMNS": "300"})
    assert shown.returncode == 2, shown.stderr
    refused = 1 + (len(profiles) - 1) * 2
    assert shown.stderr == (f"benchbase: error: {refused} of {2 * len(profiles)} planned runs would be refused by "
                            "`benchbase run` (the table says why)\n")
    rows = {line.split("│")[2].strip(): line.split("│")[4].strip() for line in shown.stdout.splitlines()
            if line.count("│") == 5 and "seed-" in line}
    assert rows["torch-cpu-fp32/seed-0"] == "pass"
    assert rows["torch-cpu-fp16/seed-0"].startswith("refused: precision 'fp16' needs a GPU's tensor cores")
    if "sys1" in profiles:
        assert rows["torch-sys1-fp32/seed-0"].startswith("refused: hardware profile 'sys1' plans 4 cuda device(s)")
    assert not out.exists()


def test_the_sweep_file_documentation_names_every_field():
    documented = (Path(__file__).parents[1] / "examples" / "README.md").read_text()
    for name, field in SweepSpec.model_fields.items():
        assert f"| `{field.alias or name}` |" in documented, name


def test_runs_started_by_a_sweep_get_its_organization_and_resumed_ones_keep_their_own(tmp_path):
    from benchbase.cli.sweep_command import run_arguments

    run = plan_sweep(SweepSpec.model_validate(GRID))[0]
    assert run_arguments(run, tmp_path, "start", "ACME")[-2:] == ["--org", "ACME"]
    assert "--org" not in run_arguments(run, tmp_path, "start", None)
    assert run_arguments(run, tmp_path, "resume", "ACME") == ["run", "--resume", str(run.folder(tmp_path))]

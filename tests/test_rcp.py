"""Reference convergence points (benchbase.rcp): the rule against mlperf_logging's own RCP checker on the
same numbers, the RCP file and its one-line errors, and `benchbase rcp make` / `check` / `score` on run
folders whose compliance logs are written with benchbase's ComplianceLog, evaluations at chosen epochs
(no training)."""

from __future__ import annotations

import io
import json
import math
import re
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import benchbase_in_process
from mlperf_logging.rcp_checker import rcp_checker as official

from benchbase.cli import main
from benchbase.compliance import ComplianceLog
from benchbase.compliance import keys as own_keys
from benchbase.compliance.keys import constants
from benchbase.errors import InputError
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.builtins.workloads import builtin_workload
from benchbase.plugin_host.registry import collect_registry
from benchbase.rcp import Case, RcpFile, bundled_rcp, judge, load_rcp, read_rcp_text, reference_point
from benchbase.rcp.rule import interpolated_point, prune
from benchbase.specs import RunResult, WorkloadSpec

# --- the rule against mlperf_logging's RCP_Checker --------------------------------------------------------

OFFICIAL_RUNS = 10  # mlperf_logging's submission_runs for rnnt: the references have 20 per batch size
RNNT = {record["BS"]: record["Epochs to converge"] for record in json.loads(
    (Path(official.__file__).parent / "training_1.1.0" / "rcps_rnnt.json").read_text()).values()}
_rng = np.random.default_rng(7)
REFERENCES = {
    # MLPerf's own rnnt RCPs: 1024 is pruned for converging slower than 2048.
    "rnnt": RNNT,
    # 200 converges slower than the interpolation of 100 and 300, so it is pruned.
    "slow-middle": {100: [10, 11, 9, 10, 12, 10, 11, 9, 10, 10] * 2, 200: [20, 21, 19, 22, 20, 20, 21, 20, 19, 20] * 2,
                    300: [22, 23, 21, 22, 24, 22, 23, 22, 21, 22] * 2},
    # Every reference run converged at the same epoch: stdev 0, no speedup allowed.
    "stdev-0": {512: [40] * 20, 2048: [50] * 20},
    "random": {batch: list(_rng.integers(low, low + spread, 20)) for batch, low, spread in
               [(64, 30, 9), (128, 28, 5), (256, 33, 12), (512, 45, 20)]},
}


def _official_file(name: str) -> io.StringIO:
    return io.StringIO(json.dumps({f"{name}_{batch}": {"Benchmark": "rnnt", "BS": batch, "Hyperparams": {},
                                                       "Epochs to converge": [int(epoch) for epoch in epochs]}
                                   for batch, epochs in REFERENCES[name].items()}))


def _official_checker(name: str) -> official.RCP_Checker:
    return official.RCP_Checker("training", "1.1.0", "rnnt", verbose=False, rcp_file=_official_file(name))


def _points(name: str):
    return [reference_point(batch, epochs, OFFICIAL_RUNS) for batch, epochs in sorted(REFERENCES[name].items())]


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_each_rcp_has_the_official_mean_stdev_min_epochs_and_max_speedup(name):
    checker = _official_checker(name)
    theirs = {record["BS"]: record for record in checker.rcp_data.values()}
    for point in _points(name):
        record = theirs[point.batch]
        assert (point.mean, point.stdev, point.min_epochs, point.max_speedup) == pytest.approx(
            (record["RCP Mean"], record["RCP Stdev"], record["Min Epochs"], record["Max Speedup"]), rel=1e-12)
    assert sorted(point.batch for point in prune(_points(name), OFFICIAL_RUNS)) == sorted(
        record["BS"] for record in checker.pruned_rcp_data.values())


def test_pruning_is_exercised_both_ways():
    assert [point.batch for point in prune(_points("rnnt"), OFFICIAL_RUNS)] == [2048, 3072, 6144]
    assert [point.batch for point in prune(_points("slow-middle"), OFFICIAL_RUNS)] == [100, 300]


@pytest.mark.parametrize(("name", "batch"), [("rnnt", 4096), ("rnnt", 2500), ("slow-middle", 150), ("random", 300)])
def test_an_interpolated_rcp_is_the_officials(name, batch):
    checker = _official_checker(name)
    records = sorted(checker.rcp_data.values(), key=lambda record: record["BS"])
    low = max((record for record in records if record["BS"] < batch), key=lambda record: record["BS"])
    high = min((record for record in records if record["BS"] > batch), key=lambda record: record["BS"])
    _, theirs = checker._create_interp_rcp(batch, low, high)
    by_batch = {point.batch: point for point in _points(name)}
    mine = interpolated_point(batch, by_batch[low["BS"]], by_batch[high["BS"]], OFFICIAL_RUNS)
    assert (mine.mean, mine.stdev, mine.min_epochs, mine.max_speedup) == pytest.approx(
        (theirs["RCP Mean"], theirs["RCP Stdev"], theirs["Min Epochs"], theirs["Max Speedup"]), rel=1e-12)


NC = None  # a run that never converged
SETS = [
    ("rnnt", 2048, [56, 57, 55, 58, 56, 57, 56, 57, 58, 55], Case.FOUND),              # like the reference
    ("rnnt", 2048, [55, 55, 56, 55, 56, 55, 56, 56, 55, 56], Case.FOUND),              # faster, within: normalized
    ("rnnt", 2048, [40] * 10, Case.FOUND),                                             # too fast
    ("rnnt", 2048, [56] * 9 + [NC], Case.FOUND),                                        # one never converged
    ("rnnt", 2048, [56] * 8 + [NC, NC], Case.INSUFFICIENT_CONVERGENCE),
    ("rnnt", 4096, [75] * 10, Case.INTERPOLATED),
    ("rnnt", 4096, [60] * 10, Case.INTERPOLATED),
    ("rnnt", 512, [60] * 10, Case.SLOWER_AT_SMALLER_BATCH),                            # below every RCP, slower
    ("rnnt", 512, [40] * 10, Case.MISSING),                                            # below every RCP, faster
    ("rnnt", 1024, [57] * 10, Case.SLOWER_AT_SMALLER_BATCH),                           # an RCP, but pruned
    ("rnnt", 8192, [100] * 10, Case.MISSING),                                          # above every RCP
    ("slow-middle", 200, [15] * 10, Case.INTERPOLATED),
    ("stdev-0", 512, [40] * 10, Case.FOUND),
    ("stdev-0", 512, [39] + [40] * 8 + [39], Case.FOUND),                              # any speedup fails
    ("stdev-0", 1024, [40, 43, 44, 45, 43, 42, 44, 43, 42, 41], Case.INTERPOLATED),
    ("random", 128, [int(value) for value in _rng.integers(26, 33, 10)], Case.FOUND),
    ("random", 200, [int(value) for value in _rng.integers(25, 35, 10)], Case.INTERPOLATED),
]
OFFICIAL_CASES = {"RCP found": Case.FOUND, "RCP Interpolation": Case.INTERPOLATED,
                  "RCP not found but slower convergence on smaller batch size": Case.SLOWER_AT_SMALLER_BATCH,
                  "Insufficient convergence": Case.INSUFFICIENT_CONVERGENCE}


def _official_verdict(name: str, batch: int, epochs: list[int | None], folder: Path) -> tuple[bool, Case, float]:
    """check_directory on result files of the set: the official checker reads a run's epochs from its last
    eval_accuracy before run_stop, and a run whose run_stop is not a success as never converged."""
    folder.mkdir()
    for index, epoch in enumerate(epochs):
        events = [("submission_benchmark", "rnnt", {}), ("global_batch_size", batch, {}),
                  ("eval_accuracy", 0.05, {"epoch_num": epoch or 99}),
                  ("run_stop", None, {"status": "aborted" if epoch is None else "success"})]
        (folder / f"result_{index}.txt").write_text("".join(
            ":::MLLOG " + json.dumps({"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": key,
                                      "value": value, "metadata": metadata}) + "\n" for key, value, metadata in events))
    passed, message, norm = official.check_directory(str(folder), "training", "1.1.0", False, False,
                                                     rcp_file=_official_file(name), rcp_pass="pruned_rcps")
    case = Case.MISSING if message.startswith(("Missing RCP", "Cannot find")) else OFFICIAL_CASES[message]
    return passed, case, norm


@pytest.mark.parametrize(("name", "batch", "epochs", "case"), SETS)
def test_a_set_gets_the_official_verdict_and_norm_factor(name, batch, epochs, case, tmp_path):
    verdict = judge(_points(name), batch, epochs, OFFICIAL_RUNS, "loss<=1")
    passed, their_case, norm = _official_verdict(name, batch, epochs, tmp_path / "set")
    assert (verdict.passed, verdict.case) == (passed, their_case)
    assert verdict.case is case
    if verdict.point is not None:
        assert verdict.norm_factor == pytest.approx(norm, rel=1e-12)


def test_the_verdicts_cover_pass_fail_and_normalization():
    verdicts = [judge(_points(name), batch, epochs, OFFICIAL_RUNS, "x") for name, batch, epochs, _ in SETS]
    assert {(verdict.passed, verdict.norm_factor > 1) for verdict in verdicts} == {
        (True, False), (True, True), (False, False), (False, True)}


def test_a_set_of_another_size_is_no_verdict_on_convergence():
    verdict = judge(_points("rnnt"), 2048, [56] * 9, OFFICIAL_RUNS, "WER<=1")
    assert (verdict.passed, verdict.case) == (False, Case.WRONG_RUN_COUNT)
    assert verdict.explanation == "9 run(s) at batch 2048, but the RCP needs exactly 10 (its reference has 20)"


def test_the_explanation_states_the_numbers():
    point = reference_point(32, [8, 9, 9, 10, 10, 10, 11, 11, 12, 13], 5)
    verdict = judge([point], 32, [4, 4, 5, 4, 5], 5, "paper_cer<=25")
    assert verdict.explanation == (
        f"the 5 runs' olympic mean of 4.33 epochs to paper_cer<=25 is below the {point.min_epochs:.2f} that the RCP "
        "allows (mean 10.25, 10 reference runs): converges faster than the reference")
    assert not verdict.passed and verdict.submission_mean == pytest.approx(13 / 3)


# --- run folders written as the harness writes them ----------------------------------------------------------

WORKLOAD = builtin_workload("ds2-mini")
LABELS = [target.label for target in WORKLOAD.tta.targets]
REFERENCE_EPOCHS = [8, 9, 9, 10, 10, 10, 11, 11, 12, 13]


def write_run(folder: Path, seed: int, reach: int | None, *, batch: int = 32, division: str = "closed",
              workload: WorkloadSpec = WORKLOAD, backend: str = "torch", learning_rate: float | None = None) -> Path:
    """A run folder whose log evaluates every epoch and first has the median of the last 3 evaluations at
    every target at epoch ``reach`` (None: never; the run stops aborted after 15 epochs)."""
    folder.mkdir(parents=True)
    optimizer, evaluation = workload.optimizer, workload.evaluation
    log = ComplianceLog(folder / "mllog.log")
    try:
        for key, value in [
                (constants.SUBMISSION_DIVISION, division), (constants.SUBMISSION_BENCHMARK, workload.name),
                (constants.SEED, seed), (constants.GLOBAL_BATCH_SIZE, batch),
                (constants.GRADIENT_ACCUMULATION_STEPS, 1),
                (own_keys.TTA_SUBSET, workload.scored_subset), (constants.OPT_NAME, optimizer.name),
                (constants.OPT_BASE_LR, learning_rate or optimizer.learning_rate),
                (own_keys.OPT_ADADELTA_RHO, optimizer.rho), (own_keys.OPT_ADADELTA_EPSILON, optimizer.epsilon),
                (constants.OPT_GRADIENT_CLIP_NORM, optimizer.gradient_clip_norm),
                (own_keys.EVAL_DECODER, evaluation.decoder), (own_keys.EVAL_BEAM_WIDTH, evaluation.beam_width),
                (own_keys.EVAL_LM_MODE, evaluation.lm_mode), (own_keys.EVAL_LM_ALPHA, evaluation.lm_alpha),
                (own_keys.EVAL_LM_BETA, evaluation.lm_beta)]:
            log.event(key, value=value)
        log.start(constants.RUN_START)
        for epoch in range(1, (reach or 15) + 1):
            numbered = {constants.EPOCH_NUM: epoch}
            log.start(constants.EPOCH_START, metadata=numbered)
            log.end(constants.EPOCH_STOP, metadata=numbered)
            log.start(constants.EVAL_START, metadata=numbered)
            rate = 10.0 if reach is not None and epoch >= reach - 1 else 100.0
            for subset in workload.data.dev:
                log.event(constants.EVAL_ACCURACY, value={"wer": rate, "cer": rate, "paper_cer": rate, "loss": 1.0},
                          metadata={**numbered, own_keys.SUBSET: subset})
            log.end(constants.EVAL_STOP, metadata=numbered)
        status, reason = ("aborted", "max_epochs") if reach is None else ("success", "targets_reached")
        log.end(constants.RUN_STOP, metadata={constants.STATUS: status, own_keys.STOP_REASON: reason})
    finally:
        log.close()
    (folder / "config.json").write_text(json.dumps({
        "workload": workload.model_dump(mode="json"), "backend": backend, "seed": seed, "division": division,
        "hardware": {"name": "cpu", "pipeline": {"global_batch": batch}},
        "environment": {"benchbase": {"version": "0.2.0", "commit": "0123456789abcdef", "dirty": False}}}))
    tta = {label: None if reach is None else {"seconds": 10.0 * reach, "minutes": reach / 6, "epoch": reach}
           for label in LABELS}
    (folder / "result.json").write_text(RunResult(
        status="aborted" if reach is None else "success", tta=tta, seed=seed, workload=workload.name,
        backend=backend, division=division).model_dump_json())
    return folder


def write_group(folder: Path, epochs: list[int | None], **options) -> Path:
    for seed, reach in enumerate(epochs):
        write_run(folder / f"seed-{seed}", seed, reach, **options)
    return folder


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """A sweep folder (sweep.json beside its configuration) of ten converged reference runs."""
    root = tmp_path_factory.mktemp("rcp") / "sweep-reference"
    write_group(root / "torch-cpu", REFERENCE_EPOCHS)
    (root / "sweep.json").write_text("{}")  # damaged: its configuration folders still say what is there
    return root


@pytest.fixture(scope="module")
def rcp_file(reference) -> Path:
    out = reference.parent / "ds2-mini-rcp.json"
    main(["rcp", "make", str(reference), "--out", str(out)])
    return out


_cli = benchbase_in_process


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # rich wraps at 80 columns otherwise


# --- the RCP file -----------------------------------------------------------------------------------------------

def test_rcp_make_writes_the_reference_runs_epochs_and_provenance(rcp_file, reference):
    made = load_rcp(rcp_file)
    assert (made.workload, made.reference_backend, made.submission_runs, made.division) == (
        "ds2-mini", "torch", 5, "closed")
    [batch] = made.batches
    assert batch.global_batch == 32 and [run.run for run in batch.runs] == [f"torch-cpu/seed-{seed}"
                                                                             for seed in range(10)]
    assert [run.epochs for run in batch.runs] == [dict.fromkeys(LABELS, epoch) for epoch in REFERENCE_EPOCHS]
    assert made.hyperparameters["opt_base_learning_rate"] == 1.0 and made.hyperparameters["eval_decoder"] == "greedy"
    assert made.tta.subset == "dev-clean" and [target.label for target in made.tta.targets] == LABELS
    assert [(source.version, source.commit, source.runs) for source in made.benchbase] == [
        ("0.2.0", "0123456789abcdef", 10)]
    assert made.made_by == f"benchbase rcp make {reference} --out {rcp_file} --submission-runs 5"
    assert made.points("CER 25")[0].mean == pytest.approx(10.25)


def test_the_rcp_file_reads_back_as_written(rcp_file):
    made = load_rcp(rcp_file)
    assert read_rcp_text(made.to_json(), "copy") == made
    assert made.model_config["frozen"] and made.model_config["extra"] == "forbid"


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda text: text[:-40], "not an RCP file: malformed JSON"),
    (lambda text: "[]", "not an RCP file: expected a JSON object, got list"),
    (lambda text: text.replace('"submission_runs": 5', '"submission_runs": 6'),
     "batch 32 has 10 reference runs; an RCP needs 2 x submission_runs = 12"),
    (lambda text: text.replace('"division": "closed"', '"division": "open"'), "division: Input should be 'closed'"),
    (lambda text: text.replace('"format": 1', '"format": 1, "colour": "red"'),
     "colour: Extra inputs are not permitted"),
    (lambda text: text.replace('"CER 40": 8', '"CER 40": 0', 1), "epochs to converge must be 1 or more"),
])
def test_a_malformed_rcp_file_is_one_line_naming_it(rcp_file, tmp_path, edit, problem):
    broken = tmp_path / "broken.json"
    broken.write_text(edit(rcp_file.read_text()))
    with pytest.raises(InputError) as error:
        load_rcp(broken)
    message = str(error.value)
    assert message.startswith(f"{broken}: ") and problem in message and "\n" not in message


def test_the_bundled_rcp_is_found_by_workload_name_and_the_workload_list_ignores_it():
    found = bundled_rcp("ds2-mini")
    assert found is not None and isinstance(load_rcp(found), RcpFile)
    assert load_rcp(found).workload == "ds2-mini" and load_rcp(found).submission_runs == 5
    assert bundled_rcp("ds2-nano") is None and bundled_rcp("../ds2-mini") is None
    registered = collect_registry(get_plugin_manager(load_entrypoints=False)).workloads
    shipped = resources.files("benchbase.workloads")
    assert (shipped / "rcps" / "ds2-mini.json").is_file()
    assert sorted(registered) == sorted(item.name.removesuffix(".yaml") for item in shipped.iterdir()
                                        if item.name.endswith(".yaml"))


# --- benchbase rcp make -------------------------------------------------------------------------------------------

def test_rcp_make_prints_the_file_without_out(reference, capsys):
    code, out, err = _cli(capsys, "rcp", "make", str(reference))
    assert code == 0, err
    assert read_rcp_text(out, "stdout").batches[0].global_batch == 32
    assert "reference convergence points" in err  # the summary goes beside the file, not into it


@pytest.mark.parametrize(("extra", "options", "message"), [
    (None, ["--submission-runs", "6"], "batch 32: 10 reference run(s) (torch-cpu/seed-0, torch-cpu/seed-1, "),
    ({"reach": None}, [], "1 of 11 runs did not converge (late/seed-10 never reached CER 40, CER 30, CER 25, "),
    ({"reach": 9, "workload": builtin_workload("ds2")}, [], "the runs are of several workloads: ds2 (late/seed-10); "
     "ds2-mini (torch-cpu/seed-0"),
    ({"reach": 9, "backend": "tf"}, [], "the runs are of several backends: tf (late/seed-10); torch ("),
    ({"reach": 9, "division": "open"}, [], "late/seed-10/mllog.log: the run is in the open division; only "
     "closed-division runs"),
    ({"reach": 9, "learning_rate": 0.5}, [], "late/seed-10/mllog.log: its hyperparameters differ from "
     "torch-cpu/seed-0's: opt_base_learning_rate 0.5 (expected 1.0)"),
])
def test_rcp_make_refuses_runs_that_cannot_make_an_rcp_and_names_them(reference, tmp_path, capsys, extra, options,
                                                                      message):
    late = [] if extra is None else [str(write_run(tmp_path / "late" / "seed-10", 10, **extra).parent)]
    code, out, err = _cli(capsys, "rcp", "make", str(reference / "torch-cpu"), *late, *options)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err


# --- benchbase rcp check -------------------------------------------------------------------------------------------

def test_rcp_check_passes_a_set_that_converges_like_the_reference(rcp_file, tmp_path, capsys):
    alike = write_group(tmp_path / "tf-cpu", [10, 10, 11, 9, 10], backend="tf")
    code, out, err = _cli(capsys, "rcp", "check", str(alike), "--rcp", str(rcp_file))
    assert code == 0, err
    said = " ".join(out.split())
    assert f"PASS tf-cpu: ds2-mini, batch 32, 5 run(s) against {rcp_file}" in said
    assert "RCP found: the 5 runs' olympic mean of 10.00 epochs to paper_cer<=25 is faster than the RCP mean" in said


def test_rcp_check_fails_a_set_that_converges_faster_and_says_why(rcp_file, tmp_path, capsys):
    fast = write_group(tmp_path / "fast" / "jax-cpu", [4, 4, 5, 4, 5], backend="jax")
    write_group(tmp_path / "fast" / "tf-cpu", [10, 10, 11, 9, 10], backend="tf")
    (tmp_path / "fast" / "sweep.json").write_text("{}")
    code, out, err = _cli(capsys, "rcp", "check", str(fast.parent), "--rcp", str(rcp_file), "--json")
    assert code == 1 and err.strip() == "benchbase: error: 1 of 2 group(s) do not meet the RCP: jax-cpu"
    verdicts = json.loads(out)
    assert (verdicts["jax-cpu"]["passed"], verdicts["tf-cpu"]["passed"]) == (False, True)
    fastest = verdicts["jax-cpu"]["targets"]["CER 25"]
    assert (fastest["case"], fastest["epochs"], fastest["reference_runs"]) == ("RCP found", [4, 4, 5, 4, 5], 10)
    assert fastest["submission_mean"] == pytest.approx(13 / 3) and fastest["rcp_mean"] == pytest.approx(10.25)
    assert re.fullmatch(r"the 5 runs' olympic mean of 4\.33 epochs to paper_cer<=25 is below the \d+\.\d\d that the "
                        r"RCP allows \(mean 10\.25, 10 reference runs\): converges faster than the reference",
                        fastest["explanation"])


def test_rcp_check_does_not_judge_a_set_of_another_size(rcp_file, tmp_path, capsys):
    few = write_group(tmp_path / "few", [10, 10, 11])
    code, out, _ = _cli(capsys, "rcp", "check", str(few), "--rcp", str(rcp_file), "--json")
    assert code == 1
    target = json.loads(out)["few"]["targets"]["WER 80"]
    assert target["case"] == "wrong number of runs" and target["rcp_mean"] is None


@pytest.mark.parametrize(("options", "message"), [
    ({"division": "open"}, "seed-0/mllog.log: the run is in the open division"),
    ({"batch": 16}, None),
    ({"workload": builtin_workload("ds2")}, "seed-0/mllog.log: a run of workload 'ds2', but "),
])
def test_rcp_check_refuses_runs_that_cannot_meet_the_rcp(rcp_file, tmp_path, capsys, options, message):
    group = write_group(tmp_path / "group", [10, 10, 11, 9, 10], **options)
    if options.get("batch"):
        write_run(group / "seed-9", 9, 10)  # at the registered 32: the set mixes batch sizes
        message = "group: its runs trained at global batch sizes [16, 32]; a set of runs meets an RCP at one"
    code, out, err = _cli(capsys, "rcp", "check", str(group), "--rcp", str(rcp_file))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and message in err


def test_rcp_check_names_a_malformed_rcp_file_in_one_line(tmp_path, capsys):
    group = write_group(tmp_path / "group", [10, 10, 11, 9, 10])
    broken = tmp_path / "rcp.json"
    broken.write_text("{")
    code, _, err = _cli(capsys, "rcp", "check", str(group), "--rcp", str(broken))
    assert code == 2 and err.startswith(f"benchbase: error: {broken}: not an RCP file: malformed JSON")
    assert len(err.strip().splitlines()) == 1


def _bundled_mean() -> int:
    bundled = load_rcp(bundled_rcp("ds2-mini"))
    return math.ceil(max(bundled.points(label)[0].mean for label in LABELS))


def test_rcp_check_and_score_use_the_rcp_that_ships_with_the_workload(tmp_path, capsys):
    # At or above every target's RCP mean: converges like the reference, whatever the bundled numbers are.
    group = write_group(tmp_path / "torch-cpu", [_bundled_mean()] * 5)
    code, out, err = _cli(capsys, "rcp", "check", str(group))
    assert code == 0, err
    assert "workloads/rcps/ds2-mini.json" in " ".join(out.split())
    code, out, err = _cli(capsys, "score", str(group), "--json")
    assert code == 0, err
    found = json.loads(out)["torch-cpu"]
    assert found["CER 25"]["runs"] == 5  # the scores as before, the RCP beside them
    assert found["rcp"]["passed"] is True and found["rcp"]["file"].endswith("ds2-mini.json")
    assert set(found["rcp"]["targets"]) == set(LABELS)
    code, out, _ = _cli(capsys, "score", str(group))
    assert code == 0 and " RCP " in out and "pass" in out


def test_score_says_why_a_group_has_no_rcp_verdict(tmp_path, capsys):
    group = write_group(tmp_path / "open-runs", [9, 9, 9, 9, 9], division="open")
    code, out, err = _cli(capsys, "score", str(group), "--json")
    assert code == 0, err
    found = json.loads(out)["open-runs"]["rcp"]
    assert found["passed"] is None and found["targets"] == {} and "open division" in found["note"]
    code, out, _ = _cli(capsys, "score", str(group))
    assert code == 0 and "RCP of open-runs: not judged:" in " ".join(out.split())


def test_score_marks_each_score_whose_set_fails_the_rcp_as_not_valid(tmp_path, capsys):
    fast = write_group(tmp_path / "jax-cpu", [1, 1, 1, 1, 1], backend="jax")  # far faster than the bundled RCP
    code, out, err = _cli(capsys, "score", str(fast))
    assert code == 0, err
    rows = [line for line in out.splitlines() if line.startswith("│ jax-cpu")]
    assert len(rows) == len(LABELS), out
    for row in rows:
        cells = [cell.strip() for cell in row.strip("│").split("│")]
        score, rcp = cells[4], cells[-2]
        assert re.fullmatch(r"\d+\.\d\d \(RCP fail\)", score) and rcp == "fail", row
    assert "a score marked (RCP fail) is not a valid result" in " ".join(out.split())

"""`benchbase check`: a real run's log passes; planted faults fail with a message that names
them; garbage never makes the checker raise."""

from __future__ import annotations

import errno
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_helpers import benchbase_in_process, run_benchbase
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_plugins import LinearCTCBackend, ThirdPartyPlugin, stand_in_workload

import benchbase
from benchbase.compliance.checker import check_evidence, check_log, check_paths
from benchbase.compliance.evidence import Evidence
from benchbase.compliance.parse import parse_log, parse_log_text
from benchbase.compliance.rules import RuleSet, load_ruleset
from benchbase.errors import InputError
from benchbase.harness import run_benchmark
from benchbase.harness.unfinished import RunUnfinished
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.specs import RunConfig, RunResult, Target, TTARule, read_run_result

REACHED, NEVER = "CER 90", "CER 10"


@pytest.fixture(scope="module")
def workloads():
    return collect_registry(get_plugin_manager(load_entrypoints=False)).workloads


@pytest.fixture(scope="module")
def real_run(tmp_path_factory, small_store) -> Path:
    """A real ds2-mini run through the harness with a cheap linear CTC backend: five epochs,
    one target reached on dev-clean (at epoch 3, the first with three evaluations) and one not."""
    manager = get_plugin_manager(load_entrypoints=False)
    manager.register(ThirdPartyPlugin())
    registry = collect_registry(manager)
    rule = TTARule(subset="dev-clean", targets=(Target(metric="paper_cer", value=90),
                                                Target(metric="paper_cer", value=10)), window=3)
    workload = stand_in_workload(registry.workload("ds2-mini"), max_epochs=5, tta=rule)
    out = tmp_path_factory.mktemp("compliance") / "run"
    config = RunConfig(workload=workload, backend="linear-ctc", hardware=registry.profile("cpu"), seed=1, out=out,
                       data=small_store)
    run_benchmark(config, manager, registry.backend("linear-ctc"))
    return out


@pytest.fixture
def run_copy(real_run, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(real_run, copy)  # the decoded outputs and checkpoints are evidence too
    return copy


def test_the_real_run_reached_one_target_and_passes(real_run, workloads):
    result = json.loads((real_run / "result.json").read_text())
    assert result["tta"][REACHED]["epoch"] == 3 and result["tta"][NEVER] is None
    report = check_log(real_run / "mllog.log", workloads=workloads)
    assert report.passed, report.failures
    assert {finding.status for finding in report.findings} == {"pass"}


def test_the_real_run_logged_every_subset_and_a_final_evaluation(real_run):
    result = json.loads((real_run / "result.json").read_text())
    assert list(result["final_evaluation"]["subsets"]) == ["dev-clean", "dev-other", "test-clean", "test-other"]
    assert result["last_evaluation"]["subset"] == "dev-clean"
    assert {"wer", "cer", "paper_cer", "loss"} <= set(result["last_evaluation"]["subsets"]["dev-other"])


def test_only_the_scored_subset_decides_tta(run_copy, workloads):
    # dev-other's rates are reported beside dev-clean's, but no target is judged on them.
    _edit_events(_set_subset_rate("dev-other", "paper_cer", 1.0))(run_copy)
    report = check_log(run_copy / "mllog.log", workloads=workloads)
    # The recomputed TTA is untouched; only the cross-examination of the decoded outputs notices.
    assert {line.split(":")[0] for line in report.failures} == {"decoded_outputs"}


# --- planted faults --------------------------------------------------------------------------


def _lines(run: Path) -> list[str]:
    return (run / "mllog.log").read_text().splitlines(keepends=True)


def _edit_lines(edit: Callable[[list[str]], list[str]]) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        (run / "mllog.log").write_text("".join(edit(_lines(run))))
    return apply


def _edit_events(edit: Callable[[list[dict]], list[dict]]) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        events = [json.loads(line.split(" ", 1)[1]) for line in _lines(run)]
        (run / "mllog.log").write_text("".join(f":::MLLOG {json.dumps(e)}\n" for e in edit(events)))
    return apply


def _edit_json(name: str, edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        data = json.loads((run / name).read_text())
        edit(data)
        (run / name).write_text(json.dumps(data))
    return apply


def _index(events: list[dict], key: str, epoch: int | None = None) -> int:
    return next(i for i, e in enumerate(events) if e["key"] == key
                and (epoch is None or e["metadata"].get("epoch_num") == epoch))


def _drop(key: str) -> Callable[[list[dict]], list[dict]]:
    return lambda events: [e for e in events if e["key"] != key]


def _swap_init(events):
    a, b = _index(events, "init_start"), _index(events, "init_stop")
    events[a], events[b] = events[b], events[a]
    return events


def _skip_eval_2(events):
    return [e for e in events if not (e["key"].startswith("eval_") and e["metadata"].get("epoch_num") == 2)]


def _set_value(key: str, value) -> Callable[[list[dict]], list[dict]]:
    def edit(events):
        events[_index(events, key)]["value"] = value
        return events
    return edit


def _without_metadata(key: str, name: str):
    def edit(events):
        del events[_index(events, key)]["metadata"][name]
        return events
    return edit


def _duplicate(key: str):
    def edit(events):
        at = _index(events, key)
        return events[: at + 1] + [dict(events[at])] + events[at + 1:]
    return edit


def _long_init(events):
    shift = 31 * 60_000
    start = _index(events, "init_stop")
    return events[:start] + [{**e, "time_ms": e["time_ms"] + shift} for e in events[start:]]


def _time_goes_back(events):
    events[_index(events, "epoch_stop", 2)]["time_ms"] -= 60_000
    return events


def _truncate_last(lines):
    return lines[:-1] + [lines[-1][: len(lines[-1]) // 2]]


def _no_time_ms(lines):
    at = next(i for i, line in enumerate(lines) if '"eval_accuracy"' in line)
    record = json.loads(lines[at].split(" ", 1)[1])
    del record["time_ms"]
    return lines[:at] + [f":::MLLOG {json.dumps(record)}\n"] + lines[at + 1:]


def _duplicate_field(lines):
    return lines[:3] + [lines[3].replace('"time_ms"', '"time_ms": 1, "time_ms"', 1)] + lines[4:]


def _tamper_tta(result):
    result["tta"][REACHED]["seconds"] = result["tta"][REACHED]["seconds"] / 2 - 1


def _claim_unreached(result):
    result["tta"][NEVER] = {"seconds": 4.0, "minutes": 0.0667, "epoch": 4}


def _set_subset_rate(subset: str, metric: str, value: float):
    def edit(events):
        for event in events:
            if event["key"] == "eval_accuracy" and event["metadata"].get("subset") == subset:
                event["value"][metric] = value
        return events
    return edit


def _pool_dev(events):
    return [e for e in events if not (e["key"] == "eval_accuracy" and e["metadata"].get("subset") == "dev-other")]


def _final_wer(result):
    result["final_evaluation"]["subsets"]["test-clean"]["wer"] = 12.5


def _tta_subset(config):
    config["workload"]["tta"]["subset"] = "dev-other"


def _edit_wer_of_dev_other(events):
    at = next(i for i, e in enumerate(events) if e["key"] == "eval_accuracy" and e["metadata"]["subset"] == "dev-other")
    events[at]["value"]["wer"] = 12.5
    return events


def _delete(name: str) -> Callable[[Path], None]:
    return lambda run: (run / name).unlink()


def _keep_half_of(name: str) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        lines = (run / name).read_text().splitlines(keepends=True)
        (run / name).write_text("".join(lines[: len(lines) // 2]))
    return apply


def _shift_evaluations(seconds: float) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        for record in records:
            if record["kind"] == "eval":
                record["t"] += seconds
        (run / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    return apply


def _beam_width(config):
    config["workload"]["evaluation"]["beam_width"] = 256


def _without_python(events):
    del events[_index(events, "benchbase_environment")]["value"]["python"]
    return events


def _other_torch(result):
    result["environment"]["packages"]["torch"] = "9.9.9"


FAULTS = {
    "environment not recorded": (_edit_events(_drop("benchbase_environment")), "environment",
                                 "no benchbase_environment event"),
    "environment without python": (_edit_events(_without_python), "environment", "benchbase_environment lacks python"),
    "result.json's environment edited": (_edit_json("result.json", _other_torch), "environment",
                                         "result.json's environment differs from the log's"),
    "missing run_stop": (_edit_events(_drop("run_stop")), "run_stop_status", "run_stop appears 0 times"),
    "reordered init": (_edit_events(_swap_init), "order", "init_start must come before init_stop"),
    "skipped evaluation": (_edit_events(_skip_eval_2), "eval_cadence", "epoch 2 ended without an evaluation"),
    "truncated line": (_edit_lines(_truncate_last), "lines_parse", "malformed JSON (truncated line?)"),
    "line without time_ms": (_edit_lines(_no_time_ms), "lines_parse", "event without time_ms"),
    "tampered result.json": (_edit_json("result.json", _tamper_tta), "result_tta", f"claims {REACHED} at"),
    "unreached target claimed": (_edit_json("result.json", _claim_unreached), "result_tta", "never reach"),
    "wrong optimizer": (_edit_events(_set_value("opt_name", "sgd")), "fixed_hyperparameters",
                        "opt_name is 'sgd' in the log, but the run's own config.json (open division) pins "
                        "optimizer.name = "
                        "'adadelta'"),
    "wrong learning rate": (_edit_events(_set_value("opt_base_learning_rate", 0.001)), "fixed_hyperparameters",
                            "opt_base_learning_rate is 0.001"),
    # The run changed its targets, so it is open and held to its own config.json: an edited
    # config.json then contradicts its own log.
    "wrong beam width": (_edit_json("config.json", _beam_width), "fixed_hyperparameters",
                         "eval_beam_width is 1 in the log, but the run's own config.json (open division) pins "
                         "evaluation.beam_width = 256"),
    "duplicated key": (_edit_events(_duplicate("seed")), "key_counts", "seed appears 2 times"),
    "duplicated field": (_edit_lines(_duplicate_field), "lines_parse", "duplicated field 'time_ms'"),
    "two run_stops": (_edit_events(_duplicate("run_stop")), "run_stop_status", "run_stop appears 2 times"),
    "missing seed": (_edit_events(_drop("seed")), "key_counts", "seed appears 0 times"),
    "init over 30 minutes": (_edit_events(_long_init), "init_duration", "init took 31.0 minutes"),
    "time goes back": (_edit_events(_time_goes_back), "monotonic_time", "time_ms goes back"),
    "eval_accuracy without epoch_num": (_edit_events(_without_metadata("eval_accuracy", "epoch_num")),
                                        "event_metadata", "eval_accuracy at line"),
    "run_stop without status": (_edit_events(_without_metadata("run_stop", "status")), "run_stop_status",
                                "has no status"),
    "status edited": (_edit_json("result.json", lambda r: r.update(status="success")), "result_consistency",
                      "result.json says status 'success', the log says 'aborted'"),
    "garbage line": (_edit_lines(lambda lines: lines[:5] + ["hello\n"] + lines[5:]), "lines_parse",
                     "line 6: not an MLLOG line"),
    "over the thread budget": (_edit_events(_set_value("benchbase_cpu_cores_in_steps", 1.9)), "thread_budget",
                               "training kept 1.9 CPU cores busy, over its budget of 1 threads"),
    "thread use not recorded": (_edit_events(_drop("benchbase_cpu_cores_in_steps")), "thread_budget",
                                "no benchbase_cpu_cores_in_steps event"),
    "scored subset's rates edited": (_edit_events(_set_subset_rate("dev-clean", "paper_cer", 5.0)), "result_tta",
                                     f"says {NEVER} was never reached, but the log reaches it"),
    "pooled dev subsets": (_edit_events(_pool_dev), "eval_subsets", "scored dev-clean, but the run's own config.json"),
    "final evaluation edited": (_edit_json("result.json", _final_wer), "final_evaluation",
                                "final wer on test-clean is 12.5"),
    "scored on another subset": (_edit_json("config.json", _tta_subset), "eval_subsets",
                                 "benchbase_tta_subset is 'dev-clean' in the log, but the run's own config.json"),
    "language model weight edited": (_edit_events(_set_value("eval_lm_alpha", 2.0)), "fixed_hyperparameters",
                                     "eval_lm_alpha is 2.0 in the log"),
    "rates edited beside their decoded outputs": (_edit_events(_edit_wer_of_dev_other), "decoded_outputs",
                                                  "says wer 12.5, its decoded outputs"),
    "decoded outputs missing": (_delete("decoded/dev-clean-epoch-002.jsonl"), "decoded_outputs",
                                "decoded/dev-clean-epoch-002.jsonl cannot be read"),
    "partial evaluation": (_keep_half_of("decoded/dev-other-epoch-001.jsonl"), "eval_counts",
                           "utterances in decoded outputs"),
    "timeline edited": (_shift_evaluations(30.0), "timeline", "an edited timeline"),
    "final checkpoint missing": (_delete("checkpoints/final.ckpt"), "artifacts",
                                 "checkpoint 'checkpoints/final.ckpt' named by the log does not exist"),
    "precision edited": (_edit_events(_set_value("precision", "bf16")), "fixed_hyperparameters",
                         "precision is 'bf16' in the log"),
    "first step not replayed": (_edit_events(_drop("benchbase_optimizer_replay")), "optimizer_replay",
                                "the log has no benchbase_optimizer_replay"),
    "replay skipped for a reason of its own": (
        _edit_events(_set_value("benchbase_optimizer_replay", {"skipped": "the backend said so"})), "optimizer_replay",
        "skipped for a reason the rule does not accept: the backend said so"),
    # The stand-in model's weights are not ds2's layout: only an open run may train such a model.
    "closed run whose weights the replay cannot read": (
        _edit_events(_set_value("submission_division", "closed")), "optimizer_replay",
        "skipped for a reason the rule does not accept: the exported weights are not the family's layout"),
    "replay disagreed": (_edit_events(_set_value("benchbase_optimizer_replay", {"agree": False, "error": "rho 0.9"})),
                         "optimizer_replay", "rho 0.9"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_planted_fault_fails_with_a_message_that_names_it(fault, run_copy, workloads):
    plant, rule, message = FAULTS[fault]
    plant(run_copy)
    report = check_log(run_copy / "mllog.log", workloads=workloads)
    assert not report.passed
    assert any(line.startswith(f"{rule}: ") and message in line for line in report.failures), report.failures


@pytest.mark.parametrize("replay", [{"skipped": "multi-process"}, {"agree": True, "worst_ratio": 0.2}])
def test_a_replay_that_agreed_or_was_skipped_for_an_accepted_reason_passes_its_rule(replay, run_copy, workloads):
    _edit_events(_set_value("benchbase_optimizer_replay", replay))(run_copy)
    findings = {finding.rule: finding for finding in check_log(run_copy / "mllog.log", workloads=workloads).findings}
    assert findings["optimizer_replay"].status == "pass", findings["optimizer_replay"].messages


def test_the_official_checker_crashes_where_benchbase_reports(run_copy, tmp_path, workloads):
    from official_checker import check_common_rules

    _edit_lines(_no_time_ms)(run_copy)
    with pytest.raises(KeyError):
        check_common_rules(run_copy / "mllog.log", tmp_path)
    failures = check_log(run_copy / "mllog.log", workloads=workloads).failures
    assert any("event without time_ms" in line for line in failures)


# --- inputs and the command line -------------------------------------------------------------


def test_a_folder_of_runs_is_checked_run_by_run(real_run, tmp_path, workloads):
    for index in range(2):
        shutil.copytree(real_run, tmp_path / "runs" / f"run-{index}")
    reports = check_paths([tmp_path / "runs"], workloads=workloads)
    assert [Path(r.source).parent.name for r in reports] == ["run-0", "run-1"] and all(r.passed for r in reports)


def test_a_result_json_that_is_no_run_result_is_one_failure_and_the_result_rules_skip(run_copy, workloads):
    _edit_json("result.json", lambda result: result["tta"][REACHED].update(seconds="fast"))(run_copy)
    findings = {finding.rule: finding for finding in check_log(run_copy / "mllog.log", workloads=workloads).findings}
    assert findings["run_files"].status == "fail"
    assert findings["run_files"].messages == [
        f"result.json: not a run result: tta.{REACHED}.seconds: Input should be a valid number"]
    assert all(findings[rule].status == "skip" for rule in ("result_consistency", "result_tta", "final_evaluation"))


def test_a_path_without_a_log_is_unusable_input(tmp_path):
    with pytest.raises(InputError, match="no mllog.log"):
        check_paths([tmp_path])
    with pytest.raises(InputError, match="no such file"):
        check_paths([tmp_path / "missing"])


def test_a_bare_log_skips_the_result_rules(real_run, tmp_path, workloads):
    bare = tmp_path / "bare.log"
    shutil.copy(real_run / "mllog.log", bare)
    report = check_log(bare, workloads=workloads)
    assert report.passed
    assert {f.rule for f in report.findings if f.status == "skip"} == {
        "result_consistency", "result_tta", "final_evaluation", "decoded_outputs", "eval_counts", "timeline",
        "artifacts", "independent_scoring", "compute"}  # independent_scoring: an open run's own workload is in
    # its config.json


def test_rule_sets_are_validated_data():
    ruleset = load_ruleset("1.0")
    assert ruleset.version == "1.0" and "eval_cadence" in {rule.check for rule in ruleset.rules}
    with pytest.raises(InputError, match="unknown rule set '9.9'"):
        load_ruleset("9.9")
    with pytest.raises(ValueError, match="does not match any of the expected tags"):
        RuleSet.model_validate({"version": "1", "rules": [{"check": "eval('1')"}]})


_benchbase = run_benchbase


def test_the_cli_exit_codes_are_pass_fail_and_unusable(real_run, run_copy, tmp_path):
    assert _benchbase("check", str(real_run)).returncode == 0
    _edit_events(_set_value("opt_name", "sgd"))(run_copy)
    failed = _benchbase("check", "--json", str(run_copy))
    assert failed.returncode == 1
    document = json.loads(failed.stdout)
    assert document["passed"] is False and "opt_name is 'sgd'" in failed.stdout
    unusable = _benchbase("check", str(tmp_path / "missing"))
    assert unusable.returncode == 2 and "no such file" in unusable.stderr


# --- garbage in, findings out ----------------------------------------------------------------

_LINE_PIECES = st.sampled_from([
    ":::MLLOG ", "{", "}", '"time_ms": ', '"key": ', '"event_type": ', '"value": ', '"metadata": ',
    '"epoch_num": ', '"status": ', '"run_start"', '"run_stop"', '"eval_accuracy"', '"INTERVAL_END"',
    '"POINT_IN_TIME"', '{"wer": 5, "cer": 1}', "NaN", "1e400", "-1", "null", "[", "]", ",", ":", '"', "\\u0000",
])
_GARBAGE_LINE = st.one_of(st.text(max_size=80), st.lists(_LINE_PIECES, max_size=20).map("".join))
_FINITE = st.floats(allow_nan=False, allow_infinity=False)
_ANY_JSON = st.one_of(st.none(), st.integers(), st.text(max_size=5), st.dictionaries(st.text(max_size=8), st.none()))
# What reaches the checks has passed RunResult; its free-form parts may still hold anything.
_NONSENSE_RESULT = st.builds(
    RunResult, status=st.text(max_size=8), seed=st.one_of(st.none(), st.integers()),
    workload=st.one_of(st.none(), st.text(max_size=5)),
    tta=st.dictionaries(st.text(max_size=8), st.one_of(st.none(), st.fixed_dictionaries(
        {"seconds": _FINITE, "minutes": _FINITE, "epoch": st.integers()}))),
    final_evaluation=st.one_of(st.none(), st.dictionaries(st.sampled_from(["subsets", "decoder", "epoch"]), _ANY_JSON)),
    resumes=st.lists(st.dictionaries(st.text(max_size=5), _ANY_JSON), max_size=3))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_GARBAGE_LINE, max_size=25), result=st.one_of(st.none(), _NONSENSE_RESULT))
def test_the_checker_never_raises_on_garbage(lines, result, workloads):
    evidence = Evidence("garbage", parse_log_text("\n".join(lines)), result=result,
                        config={"workload": workloads["ds2-mini"].model_dump(mode="json")},
                        workload=workloads["ds2-mini"].model_dump(mode="json"))
    report = check_evidence(evidence, load_ruleset())
    assert not any("checker error" in line for line in report.failures), report.failures


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_real_logs_never_make_the_checker_raise(data, real_run, workloads):
    raw = (real_run / "mllog.log").read_bytes()
    cut = data.draw(st.integers(0, len(raw)))
    insert = data.draw(st.binary(max_size=12))
    evidence = Evidence("mutated", parse_log(raw[:cut] + insert + raw[cut + len(insert):]),
                        result=read_run_result((real_run / "result.json").read_text()),
                        workload=workloads["ds2-mini"].model_dump(mode="json"))
    report = check_evidence(evidence, load_ruleset())
    assert not any("checker error" in line for line in report.failures), report.failures


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(decoded=st.one_of(st.binary(max_size=200), _GARBAGE_LINE.map(str.encode)),
       metrics=st.one_of(st.binary(max_size=200), st.lists(_GARBAGE_LINE, max_size=5).map("\n".join).map(str.encode)),
       checkpoint_name=st.text(max_size=30))
def test_garbage_in_the_run_folder_never_makes_the_checker_raise(decoded, metrics, checkpoint_name, real_run,
                                                                  tmp_path_factory, workloads):
    run = tmp_path_factory.mktemp("garbage") / "run"
    shutil.copytree(real_run, run)
    (run / "decoded" / "dev-clean-epoch-001.jsonl").write_bytes(decoded)
    (run / "metrics.jsonl").write_bytes(metrics)
    lines = (run / "mllog.log").read_text().splitlines()
    lines.append(':::MLLOG ' + json.dumps({"namespace": "", "time_ms": 2**41, "event_type": "POINT_IN_TIME",
                                           "key": "benchbase_checkpoint", "value": checkpoint_name,
                                           "metadata": {"final": True}}))
    (run / "mllog.log").write_text("\n".join(lines) + "\n")
    report = check_log(run / "mllog.log", workloads=workloads)
    assert not any("checker error" in line for line in report.failures), report.failures


def _division(run: Path, workloads) -> dict:
    report = check_log(run / "mllog.log", load_ruleset("1.4"), workloads=workloads)
    [finding] = [finding for finding in report.findings if finding.rule == "division"]
    return {"status": finding.status, "messages": finding.messages}


def test_a_config_written_before_a_field_existed_keeps_the_closed_division(tmp_path, workloads):
    """A real closed ds2-mini run whose config.json predates evaluation.independent_utterances: the
    absent field is its default, as it was for the run. A required field deleted is still a change."""
    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "data" / "rcp" / "torch-cpu" / "seed-0", run)
    assert "independent_utterances" not in (run / "config.json").read_text()
    assert _division(run, workloads) == {"status": "pass", "messages": []}
    _edit_json("config.json", lambda config: config["workload"]["model"].pop("lstm_units"))(run)
    found = _division(run, workloads)
    assert found["status"] == "fail" and "model.lstm_units: 96 -> None" in found["messages"][0]


# --- a compliant log is not always a result ---------------------------------------------------------------


class FullDiskAtTheFinalCheckpoint(LinearCTCBackend):
    """The disk fills up as the final checkpoint is written: after run_stop, before result.json."""

    name = "full-disk-at-the-final-checkpoint"

    def save_checkpoint(self, path: Path):
        if "final.ckpt" in path.name:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        super().save_checkpoint(path)


class FullDiskPlugin:
    @benchbase.hookimpl
    def register_backends(self, register):
        register(FullDiskAtTheFinalCheckpoint)


@pytest.fixture(scope="module")
def crashed_run(tmp_path_factory, small_store) -> Path:
    """The real run's workload, stopped at its three epochs, and then ENOSPC at the final checkpoint."""
    manager = get_plugin_manager(load_entrypoints=False)
    manager.register(FullDiskPlugin())
    registry = collect_registry(manager)
    rule = TTARule(subset="dev-clean", targets=(Target(metric="paper_cer", value=90),), window=3)
    workload = stand_in_workload(registry.workload("ds2-mini"), max_epochs=3, tta=rule)
    out = tmp_path_factory.mktemp("crashed") / "run"
    config = RunConfig(workload=workload, backend=FullDiskAtTheFinalCheckpoint.name, hardware=registry.profile("cpu"),
                       seed=1, out=out, data=small_store)
    # The harness names the run unfinished (run_stop logged, no result.json), the full disk as the cause.
    with pytest.raises(RunUnfinished, match=r"the disk is full .*run is unfinished") as raised:
        run_benchmark(config, manager, registry.backend(FullDiskAtTheFinalCheckpoint.name))
    assert isinstance(raised.value.__cause__, OSError)
    return out


def _stopped_by(reason: str) -> Callable[[list[dict]], list[dict]]:
    """The log of a run that ``reason`` stopped: run_stop aborted, nothing after it (no final evaluation)."""
    def edit(events):
        stop = _index(events, "run_stop")
        events[stop]["metadata"].update(status="aborted", stop_reason=reason, error="KeyboardInterrupt: ")
        return events[:stop + 1]
    return edit


def _interrupted(run: Path) -> None:
    _edit_events(_stopped_by("interrupted"))(run)
    for name in ("result.json", "checkpoints/final.ckpt", "checkpoints/final.weights.npz"):
        (run / name).unlink()


def test_a_run_that_crashed_after_run_stop_is_a_compliant_log_but_no_result(crashed_run, capsys):
    assert "run_stop" in (crashed_run / "mllog.log").read_text() and not (crashed_run / "result.json").exists()
    code, out, err = benchbase_in_process(capsys, "check", str(crashed_run))
    said = " ".join(out.split())
    assert code == 4, out + err
    assert out.split()[0] == "UNFINISHED" and "not a result: no result.json" in said
    assert "1/1 log(s) pass rule set 1.9, 1 of them of a run that did not finish" in said
    assert err.strip() == ("benchbase: error: 1 of 1 log(s) are of runs that did not finish: compliant logs, not "
                           "results (exit code 4)")


@pytest.mark.parametrize("bare", [False, True], ids=["run-folder", "bare-log"])
def test_an_interrupted_run_is_unfinished_by_its_run_stop(run_copy, tmp_path, capsys, bare):
    _interrupted(run_copy)
    log = run_copy / "mllog.log"
    if bare:
        log = Path(shutil.copy(log, tmp_path / "bare.log"))
    code, out, err = benchbase_in_process(capsys, "check", "--json", str(log))
    assert code == 4, out + err
    document = json.loads(out)
    [report] = document["logs"]
    assert report["passed"] is True and report["verdict"] == document["verdict"] == "unfinished"
    assert report["unfinished"] == "the run stopped: interrupted (KeyboardInterrupt)"
    assert report["resume"] is None  # the run kept no periodic checkpoint to go on from


def _terminated_before_its_first_evaluation(run: Path, keep_a_checkpoint: bool) -> None:
    """SIGTERM in the first epoch: nothing evaluated, no result, and perhaps one complete checkpoint."""
    def edit(events):
        stop = events[_index(events, "run_stop")]
        stop["metadata"].update(status="aborted", stop_reason="interrupted", error="Terminated: ")
        return [*events[:_index(events, "epoch_start") + 1], stop]
    _edit_events(edit)(run)
    for name in ("result.json", "checkpoints/final.ckpt", "checkpoints/final.weights.npz"):
        (run / name).unlink()
    if keep_a_checkpoint:
        from benchbase.harness.resume import write_sidecar
        from benchbase.harness.resume_state import ResumeState

        checkpoint = run / "checkpoints" / "batch-0000002.ckpt"
        checkpoint.write_bytes(b"weights")
        write_sidecar(checkpoint, ResumeState.from_dict({
            "batch_index": 2, "epoch": 1, "batches_done_in_epoch": 2, "train_samples": 8, "clock_s": 1.0,
            "step_cpu_seconds": 0.5, "tracker": {"history": {}, "reached": {}, "reached_epoch": {}},
            "last_evaluation": None}))


@pytest.mark.parametrize("resumable", [True, False], ids=["resumable", "no-checkpoint"])
def test_a_stopped_run_leads_with_why_and_says_how_to_continue_it(run_copy, capsys, monkeypatch, resumable):
    monkeypatch.setenv("COLUMNS", "200")  # the folder's path on one line, however deep the temporary folder
    _terminated_before_its_first_evaluation(run_copy, keep_a_checkpoint=resumable)
    code, out, err = benchbase_in_process(capsys, "check", str(run_copy))
    said = " ".join(out.split())
    assert code == 1, out + err
    cause = said.index("not a result: the run stopped: interrupted (Terminated); what fails below may follow from "
                       "that")
    assert cause < said.index("key_counts"), out  # the cause leads, what follows from it comes after
    assert not any(line.rstrip().endswith(":") for line in out.splitlines()), out
    command = f"benchbase run --resume {run_copy}"
    assert (f"continue it with: {command} " in said[cause:said.index("key_counts")]) is resumable, out
    code, out, err = benchbase_in_process(capsys, "check", "--json", str(run_copy))
    assert json.loads(out)["logs"][0]["resume"] == (command if resumable else None)
    code, out, err = benchbase_in_process(capsys, "verify", str(run_copy))
    assert code == 2 and (f"continue it with `{command}`" in err) is resumable, err


def test_a_run_aborted_at_its_epoch_limit_is_a_result_and_says_so(real_run, capsys):
    code, out, err = benchbase_in_process(capsys, "check", str(real_run))
    said = " ".join(out.split())
    assert code == 0, out + err
    assert out.split()[0] == "PASS" and "1/1 log(s) pass rule set 1.9" in said
    assert "stopped at its limit (max_epochs) with status aborted: a finished run and a result" in said


@pytest.fixture
def unreadable(monkeypatch):
    """Make files unreadable to this process. Tests run as root here, whom chmod 000 does not stop,
    so the refusal is injected where every reader opens a file (io.open, which pathlib calls, and
    the builtin open): EACCES, as an unreadable file gives."""
    import builtins
    import io

    refused: set[Path] = set()
    real_open = io.open

    def guarded_open(file, *args, **kwargs):
        if isinstance(file, str | Path) and Path(file).resolve() in refused:
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(io, "open", guarded_open)
    monkeypatch.setattr(builtins, "open", guarded_open)
    return lambda path: refused.add(Path(path).resolve())


@pytest.mark.parametrize("name", ["config.json", "mllog.log", "result.json"])
def test_a_file_a_command_needs_and_cannot_read_is_one_line_and_exit_2_in_every_command(run_copy, tmp_path,
                                                                                       capsys, unreadable, name):
    unreadable(run_copy / name)
    needed_by = {"config.json": ("check", "verify", "score", "report"), "mllog.log": ("check", "verify"),
                 "result.json": ("check", "score", "report")}[name]
    for command in needed_by:
        extra = ("--out", str(tmp_path / "report"), "--no-figures") if command == "report" else ()
        code, out, err = benchbase_in_process(capsys, command, str(run_copy), *extra)
        assert (code, err.strip()) == (2, f"benchbase: error: {run_copy / name}: cannot read: Permission denied"), (
            command, out + err)


def test_score_and_report_go_on_without_an_unreadable_log_or_telemetry_and_say_so(run_copy, tmp_path, capsys,
                                                                                 unreadable, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")  # each warning on one line, however deep the temporary folder
    unreadable(run_copy / "mllog.log")
    unreadable(run_copy / "telemetry.jsonl")
    log_line = f"{run_copy / 'mllog.log'}: cannot read: Permission denied: scored from result.json alone"
    code, out, err = benchbase_in_process(capsys, "score", str(run_copy))
    assert code == 0 and log_line in " ".join(out.split()), out + err
    code, out, err = benchbase_in_process(capsys, "report", str(run_copy), "--out", str(tmp_path / "report"))
    said = " ".join(out.split())
    assert code == 0, out + err
    assert log_line in said and (f"{run_copy / 'telemetry.jsonl'}: cannot read: Permission denied: the report "
                                 "goes on without it") in said, out
    assert (tmp_path / "report" / "report.md").is_file()

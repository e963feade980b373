"""`--set` overrides and MLPerf's divisions: what changes a run, and what the checker holds it to."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from cli_helpers import run_benchbase

from benchbase.errors import InputError
from benchbase.specs.overrides import apply_overrides, division_of, open_changes, parse_override


def test_an_override_is_a_dotted_path_and_a_yaml_value():
    assert parse_override("workload.evaluation.beam_width=64") == ("workload", "evaluation.beam_width", 64)
    assert parse_override("hardware.pipeline.threads=null") == ("hardware", "pipeline.threads", None)
    assert parse_override("workload.data.dev=[dev-clean]") == ("workload", "data.dev", ["dev-clean"])
    for bad in ("beam_width=64", "model.dropout=0.1", "workload.=3", "workload.evaluation.beam_width"):
        with pytest.raises(InputError, match="expected workload.PATH=VALUE"):
            parse_override(bad)


def test_overrides_are_validated_by_the_spec_models(registry):
    workload = registry.workload("ds2-mini")
    changed = apply_overrides(workload, [("evaluation.beam_width", 64)], "workload")
    assert changed.evaluation.beam_width == 64 and workload.evaluation.beam_width != 64
    with pytest.raises(InputError, match=r"workload with --set overrides: evaluation.beam_width: .*greater than"):
        apply_overrides(workload, [("evaluation.beam_width", -1)], "workload")
    with pytest.raises(InputError, match="workload has no field 'evaluation.beam'"):
        apply_overrides(workload, [("evaluation.beam", 3)], "workload")
    with pytest.raises(InputError, match="no evaluation.beam_width section"):
        apply_overrides(workload, [("evaluation.beam_width.x", 3)], "workload")


def test_what_the_workload_pins_decides_the_division(registry):
    registered = registry.workload("ds2-mini").model_dump(mode="json")
    assert division_of(open_changes(registered, registered)) == "closed"
    limits = {**registered, "max_minutes": 5.0, "max_epochs": 2,
              "model": {**registered["model"], "precision": "bf16"}}
    assert open_changes(registered, limits) == []  # run choices keep a run closed
    changed = {**registered, "optimizer": {**registered["optimizer"], "learning_rate": 0.5}}
    assert open_changes(registered, changed) == [
        f"optimizer.learning_rate: {registered['optimizer']['learning_rate']!r} -> 0.5"]
    assert open_changes(None, registered) == ["the workload is not a registered one"]


def _run(store, out, *extra):
    return run_benchbase("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu", "--data", str(store),
                         "--out", str(out), "--max-epochs", "1", "--no-final-eval", *extra, timeout=600)


def _edit_log(folder, key, value):
    log = folder / "mllog.log"
    lines = log.read_text().splitlines(keepends=True)
    for index, line in enumerate(lines):
        event = json.loads(line.partition(" ")[2])
        if event["key"] == key:
            event["value"] = value
            lines[index] = ":::MLLOG " + json.dumps(event) + "\n"
    log.write_text("".join(lines))


def _findings(checked) -> dict:
    return {finding["rule"]: finding for finding in json.loads(checked.stdout)["logs"][0]["findings"]}


@pytest.mark.slow
def test_a_pinned_override_is_open_and_checked_as_such(small_store, tmp_path):
    closed, opened = tmp_path / "closed", tmp_path / "open"
    assert _run(small_store, closed).returncode == 3  # aborted at max_epochs: a status
    finished = _run(small_store, opened, "--set", "workload.optimizer.learning_rate=0.5",
                    "--set", "hardware.pipeline.readers=1")
    assert finished.returncode == 3, finished.stderr[-2000:]
    result, config = (json.loads((opened / name).read_text()) for name in ("result.json", "config.json"))
    # The tests' corpus (240 utterances of seed 7) is not ds2-mini's registered data: even the run
    # without overrides is open, for its data alone.
    data = ["data.corpus.seed: 0 -> 7", "data.corpus.utterances: 3000 -> 240"]
    assert result["division"] == "open"
    assert json.loads((closed / "config.json").read_text())["open_changes"] == data
    assert config["workload"]["optimizer"]["learning_rate"] == 0.5 and config["hardware"]["pipeline"]["readers"] == 1
    assert config["overrides"] == ["workload.optimizer.learning_rate=0.5", "hardware.pipeline.readers=1"]
    assert config["open_changes"] == ["optimizer.learning_rate: 1.0 -> 0.5", *data]
    for folder in (closed, opened):
        checked = run_benchbase("check", "--json", str(folder))
        assert checked.returncode == 0, checked.stdout[-3000:]
    # The same open run whose log claims the closed division: the checker holds it to the
    # registered workload, and its learning rate contradicts it.
    claimed = tmp_path / "claimed-closed"
    shutil.copytree(opened, claimed)
    _edit_log(claimed, "submission_division", "closed")
    checked = run_benchbase("check", "--json", str(claimed))
    assert checked.returncode == 1
    findings = _findings(checked)
    assert findings["division"]["status"] == "fail"
    assert any("claims the closed division" in message for message in findings["division"]["messages"])
    assert findings["fixed_hyperparameters"]["status"] == "fail"


def test_a_workload_file_is_a_workload(registry, tmp_path):
    spec = registry.workload("ds2-mini").model_dump(mode="json")
    spec["name"] = "ds2-mini-lr05"
    spec["optimizer"]["learning_rate"] = 0.5
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert registry.workload(str(path)).optimizer.learning_rate == 0.5
    missing = run_benchbase("run", "--workload", str(tmp_path / "nope.yaml"), "--backend", "torch", "--hw", "cpu")
    assert missing.returncode == 2 and "nope.yaml: workload file not found" in missing.stderr

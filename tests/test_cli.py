"""The CLI as a user meets it: a subprocess, its exit code and its one-line errors."""

from __future__ import annotations

import pytest
from cli_helpers import run_benchbase

benchbase = run_benchbase


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "mxnet", "--workload", "ds2-mini", "--hw", "cpu"], "unknown backend 'mxnet'; available: "),
        (["--backend", "torch", "--workload", "ds3", "--hw", "cpu"], "unknown workload 'ds3'; available: ds2, ds2-mini"),
        (["--backend", "torch", "--workload", "ds2-mini", "--hw", "sys9"], "unknown hardware profile 'sys9'"),
        (["--backend", "torch", "--workload", "ds2-mini", "--hw", "cpu", "--target", "cer"], "expected METRIC=VALUE"),
        (["--backend", "torch", "--workload", "ds2-mini", "--hw", "cpu", "--target", "per=3"], "tta.targets.0.metric"),
        (["--backend", "torch", "--workload", "ds2", "--hw", "cpu"], "pass --data DIR"),
    ],
)
def test_bad_run_arguments_are_one_line_errors_with_exit_2(args, message):
    finished = benchbase("run", *args)
    assert finished.returncode == 2, finished.stderr
    assert message in finished.stderr
    assert finished.stderr.count("\n") == 1 and "Traceback" not in finished.stderr


def test_a_malformed_profile_file_is_named(tmp_path):
    profile = tmp_path / "mine.yaml"
    profile.write_text("name: mine\ndevices: {kind: cpu, count: 1, model: x}\ncpu: {model: y, cores: 0}\n")
    finished = benchbase("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", str(profile))
    assert finished.returncode == 2
    assert finished.stderr.startswith(f"benchbase: error: {profile}: cpu.cores: Input should be greater")
    assert finished.stderr.count("\n") == 1


def test_a_run_folder_that_holds_a_run_is_never_overwritten(tmp_path, small_store):
    out = tmp_path / "run"
    out.mkdir()
    (out / "result.json").write_text("{}")
    finished = benchbase("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu", "--data",
                         str(small_store), "--out", str(out))
    assert finished.returncode == 2 and "run folder exists and is not empty" in finished.stderr
    assert (out / "result.json").read_text() == "{}"


def test_plugins_lists_the_torch_backend_from_its_distribution():
    finished = benchbase("plugins")
    assert finished.returncode == 0
    assert "benchbase-torch-ds2" in finished.stdout and "register_backends" in finished.stdout


def test_data_synth_rejects_unknown_characters_in_a_text_file(tmp_path):
    text = tmp_path / "lines.txt"
    text.write_text("a fine line\nroom 101 is here\n")
    finished = benchbase("data", "synth", "--out", str(tmp_path / "c"), "--utterances", "5", "--text", str(text))
    assert finished.returncode == 2
    assert f"{text}:2" in finished.stderr and "'1'" in finished.stderr
    assert not (tmp_path / "c").exists()


def test_workloads_show_prints_every_field_the_workload_pins():
    shown = run_benchbase("workloads", "--show", "ds2", env={"COLUMNS": "250"})
    assert shown.returncode == 0, shown.stderr
    for field in ("model.batchnorm_variance", "model.ctc_impossible_alignments", "model.precision",
                  "optimizer.learning_rate", "evaluation.beam_width", "tta.targets.0.value", "data.pad_to_frames"):
        assert field in shown.stdout, field
    assert "25,623,030 parameters" in shown.stdout


def test_workloads_show_of_an_unknown_name_is_a_one_line_error():
    shown = run_benchbase("workloads", "--show", "ds3")
    assert shown.returncode == 2 and shown.stderr.count("\n") == 1 and "ds2-mini" in shown.stderr


def test_a_profile_with_more_devices_than_the_backend_spans_is_refused_before_any_work():
    refused = run_benchbase("run", "--workload", "ds2", "--backend", "jax", "--hw", "sys1", "--data", "/nonexistent")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.count("\n") == 1
    assert "plans 4 cuda devices, but backend 'jax' trains on at most 1" in refused.stderr


def test_a_filesystem_error_is_one_line_naming_the_path(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    finished = benchbase("data", "synth", "--out", str(blocker / "corpus"), "--utterances", "5")
    assert finished.returncode == 1
    # The OS's own words ("File exists": mkdir meets the file where a folder should be), on one line.
    assert finished.stderr.strip().splitlines()[-1].startswith(f"benchbase: error: {blocker}: ")
    assert "Traceback" not in finished.stderr

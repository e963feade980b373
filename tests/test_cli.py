"""The CLI as a user meets it: a subprocess, its exit code and its one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys

import click
import pytest
from cli_helpers import run_benchbase
from rich.console import Console

from benchbase.cli import cli
from benchbase.cli.check_commands import report_table
from benchbase.cli.framework_logs import filtered_native_logs
from benchbase.cli.run_command import SET_EXAMPLE
from benchbase.compliance.checker import CheckReport, Finding, what_it_checks
from benchbase.compliance.rules import load_ruleset
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry

benchbase = run_benchbase


def torch_sees_a_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "mxnet", "--workload", "ds2-mini", "--hw", "cpu"], "unknown backend 'mxnet'; available: "),
        (["--backend", "torch", "--workload", "ds3", "--hw", "cpu"],
         "unknown workload 'ds3'; available: conformer, conformer-mini, ds2, ds2-mini"),
        (["--backend", "torch", "--workload", "ds2-mini", "--hw", "sys9"], "unknown hardware profile 'sys9'"),
        (["--backend", "torch", "--workload", "ds2-mini", "--hw", "cpu", "--target", "cer"], "expected METRIC=VALUE"),
        (["--backend", "torch", "--workload", "ds2-mini", "--hw", "cpu", "--target", "per=3"],
         "--target 'per=3': unknown metric 'per'; the metrics are wer, paper_cer (the paper's CER) and cer"),
        (["--backend", "torch", "--workload", "ds2", "--hw", "cpu"], "pass --data DIR"),
        (["--backend", "torch", "--workload", "ds2-mini", "--hw", "nope"],
         "unknown hardware profile 'nope'; available: cpu, cpu2, sys1, sys10, sys2, auto (this machine), or a "
         "profile YAML file's path"),
        (["--backend", "torch", "--workload", "ds2-mini", "--hw", "cpu", "--precision", "fp16"],
         "precision 'fp16' needs a GPU's tensor cores, and this run trains on cpu"),
        # the advice names fp32, which every family has, and loads no backend to say what else
        (["--backend", "torch", "--workload", "rnnt-mini", "--hw", "cpu", "--precision", "fp16"],
         "; choose fp32 (every backend trains rnnt in it), another precision that backend 'torch' declares for "
         "rnnt (README, 'Workloads and hardware profiles'), or a GPU profile"),
        (["--backend", "torch", "--workload", "ds2-mini", "--hw", "cpu", "--org", "x" * 121],
         "--org 'xxx"),
    ],
)
def test_bad_run_arguments_are_one_line_errors_with_exit_2(args, message):
    finished = benchbase("run", *args)
    assert finished.returncode == 2, finished.stderr
    assert message in finished.stderr
    assert finished.stderr.count("\n") == 1 and "Traceback" not in finished.stderr
    assert finished.stdout == ""  # not even a blank line before the error


def test_a_spec_file_named_like_a_registered_name_is_told_how_to_be_read(tmp_path):
    """A file without a .yaml suffix or a "/" is looked up as a registered name; the error says so."""
    (tmp_path / "mine.json").write_text('{"name": "mine"}')
    refused = benchbase("run", "--workload", "mine.json", "--backend", "torch", "--hw", "cpu", cwd=tmp_path)
    assert refused.returncode == 2
    assert ("unknown workload 'mine.json'" in refused.stderr
            and "(mine.json is a file: name a spec file ./mine.json, or give it a .yaml suffix)" in refused.stderr)
    read = benchbase("run", "--workload", "./mine.json", "--backend", "torch", "--hw", "cpu", cwd=tmp_path)
    assert read.returncode == 2 and "mine.json: " in read.stderr and "Field required" in read.stderr


def test_a_target_with_an_unknown_metric_is_one_message_not_two():
    refused = benchbase("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu", "--target", "foo=40")
    assert refused.returncode == 2
    assert "unknown metric 'foo'" in refused.stderr and "Tuple should have" not in refused.stderr


@pytest.mark.parametrize("out", ["/proc/benchbase-run", "{file}/run", "{file}"])
def test_an_out_folder_that_cannot_be_made_is_one_line_with_exit_2(tmp_path, out):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = out.format(file=blocker)
    refused = benchbase("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu", "--out", out)
    assert refused.returncode == 2, refused.stderr
    assert refused.stdout == "" and refused.stderr.count("\n") == 1
    expected = "cannot create a folder in /proc" if out.startswith("/proc") else f"{blocker} is a file, not a folder"
    assert refused.stderr.startswith(f"benchbase: error: --out {out}: ") and expected in refused.stderr


@pytest.mark.skipif(torch_sees_a_gpu(), reason="--device cuda is a valid choice on this machine")
def test_device_cuda_on_a_cpu_profile_blames_the_flag_not_the_profile():
    refused = benchbase("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu", "--device", "cuda")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert refused.stderr.startswith("benchbase: error: --device cuda: backend 'torch' sees 0 cuda device(s)")
    assert "hardware profile 'cpu' plans" not in refused.stderr


def test_an_empty_profile_file_says_so(tmp_path):
    profile = tmp_path / "empty.yaml"
    profile.write_text("# nothing yet\n")
    refused = benchbase("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", str(profile))
    assert refused.returncode == 2
    assert refused.stderr == f"benchbase: error: {profile}: the file is empty; expected a mapping of fields\n"


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


# --- run --help -----------------------------------------------------------------------------


def _options(command: click.Command) -> dict[str, click.Option]:
    return {parameter.opts[0]: parameter for parameter in command.params
            if isinstance(parameter, click.Option) and not parameter.hidden}


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_every_option_has_help(command):
    for name, option in _options(cli.commands[command]).items():
        assert option.help, f"{command} {name} has no help"


def test_run_help_says_what_each_choice_means_and_the_exit_codes():
    shown = benchbase("run", "--help", env={"COLUMNS": "250"})
    assert shown.returncode == 0
    said = " ".join(shown.stdout.split())
    assert "2 for bad input" in said and "3 when a run stopped at a limit first" in said
    options = _options(cli.commands["run"])
    assert "data order" in options["--seed"].help and "auto takes the profile's" in options["--device"].help
    assert "tf32 and fp16 on GPUs only" in options["--precision"].help
    assert "fp32 (the workloads' own)" in options["--precision"].help
    assert "--profile-steps" in said and "--profile " not in said  # the profiler's flag is no hardware profile
    assert "BENCHBASE_SUBMISSION_ORG" in said and "--dry-run" in said


def test_the_set_example_in_run_help_works_on_the_cpu_profile():
    assert all(f"--set {example}" in _options(cli.commands["run"])["--set"].help for example in SET_EXAMPLE)
    planned = benchbase("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu", "--dry-run",
                        *[argument for example in SET_EXAMPLE for argument in ("--set", example)])
    assert planned.returncode == 0, planned.stderr


# --- run --dry-run --------------------------------------------------------------------------


def test_a_dry_run_prints_the_plan_and_writes_nothing(tmp_path):
    planned = benchbase("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu", "--dry-run",
                        "--runs", "2", "--profile-steps", "3", "--set", "workload.evaluation.beam_width=64",
                        cwd=tmp_path, env={"COLUMNS": "250"})
    assert planned.returncode == 0, planned.stderr
    said = " ".join(planned.stdout.split())
    for shown in ("dry run: every check before the clock passes", "ds2-mini, open division; evaluation.beam_width: "
                  "1 -> 64", "1 cpu device(s)", "run-0 (seed 0)", "run-1 (seed 1)", "profiler │ 3 steps"):
        assert shown in said, shown
    assert list(tmp_path.iterdir()) == []  # no runs/ folder, no probe left behind


def test_a_dry_run_refuses_what_a_run_refuses_and_resume_takes_no_dry_run(tmp_path):
    refused = benchbase("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "sys1", "--dry-run")
    if not refused.returncode:
        pytest.skip("this machine has sys1's four GPUs")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and refused.stdout == ""
    assert "hardware profile 'sys1' plans 4 cuda device(s)" in refused.stderr
    resumed = benchbase("run", "--resume", str(tmp_path), "--dry-run")
    assert resumed.returncode == 2 and "drop --dry-run" in resumed.stderr


def test_a_backend_is_refused_a_model_family_it_does_not_implement_before_the_clock():
    # Every installed backend now implements both families; the test's own backend declares ds2 alone.
    from test_plugins import LinearCTCBackend

    from benchbase.errors import InputError
    from benchbase.harness.devices import check_capabilities, device_plan

    registry = collect_registry(get_plugin_manager(load_entrypoints=False))
    profile = registry.profile("cpu")
    with pytest.raises(InputError, match=r"backend 'linear-ctc' does not implement the rnnt model family of "
                                         r"workload 'rnnt-mini' \(it declares ds2\)"):
        check_capabilities(LinearCTCBackend, "linear-ctc", registry.workload("rnnt-mini"), profile,
                           device_plan(profile))
    for backend in ("torch", "tf", "jax"):
        planned = benchbase("run", "--workload", "rnnt-mini", "--backend", backend, "--hw", "cpu", "--dry-run",
                            env={"COLUMNS": "250"})
        assert planned.returncode == 0, planned.stderr
    # Precisions per family: torch trains ds2 in int8-emulated, the Conformer not.
    refused = benchbase("run", "--workload", "conformer-mini", "--backend", "torch", "--hw", "cpu", "--dry-run",
                        "--precision", "int8-emulated")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert ("does not implement precision 'int8-emulated' for the conformer family (it declares bf16, fp16, fp32, "
            "tf32)" in refused.stderr)


# --- submission_org -------------------------------------------------------------------------


@pytest.mark.parametrize(("arguments", "environment", "org"), [
    ((), {}, "benchbase"), (("--org", "ACME Labs"), {}, "ACME Labs"),
    ((), {"BENCHBASE_SUBMISSION_ORG": "from-env"}, "from-env"),
    (("--org", "flag-wins"), {"BENCHBASE_SUBMISSION_ORG": "from-env"}, "flag-wins"),
])
def test_the_submitting_organization_comes_from_org_or_the_environment(arguments, environment, org):
    planned = benchbase("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu", "--dry-run",
                        *arguments, env={"COLUMNS": "250", "BENCHBASE_SUBMISSION_ORG": "", **environment})
    assert planned.returncode == 0, planned.stderr
    assert f"submission_org │ {org} " in " ".join(planned.stdout.split())


def test_the_organization_goes_into_the_run_config_and_to_every_worker(tmp_path):
    from benchbase.cli.run_command import _run_config, _worker_arguments, run, run_request
    from benchbase.cli.run_plan import resolve_run

    with run.make_context("run", ["--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu2",
                                  "--org", "ACME"]) as context:
        options = dict(context.params)
    resolved = resolve_run(run_request(options), collect_registry(get_plugin_manager()))
    config = _run_config(resolved, tmp_path / "run", tmp_path / "store", 0, options)
    # config.json is this model's dump; the harness logs submitter as MLPerf's submission_org.
    assert config.submitter == "ACME" and config.model_dump(mode="json")["submitter"] == "ACME"
    arguments = _worker_arguments(options, resolved.request, tmp_path / "store")
    assert arguments[arguments.index("--org") + 1] == "ACME"


# --- TensorFlow's start-up lines ------------------------------------------------------------


def test_a_tf_run_refused_for_its_precision_never_imports_tensorflow():
    probe = ("import sys\nfrom benchbase.cli import main\n"
             "try:\n"
             "    main(['run', '--workload', 'ds2-mini', '--backend', 'tf', '--hw', 'cpu', '--precision', 'fp16'])\n"
             "except SystemExit as exit_:\n    print(exit_.code, 'tensorflow' in sys.modules)\n")
    finished = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert finished.stdout.split() == ["2", "False"], finished.stderr


def test_a_tf_refusal_shows_no_absl_or_onednn_lines():
    refused = benchbase("run", "--workload", "ds2-mini", "--backend", "tf", "--hw", "sys1", "--dry-run")
    assert refused.returncode in (0, 2), refused.stderr  # 0 where sys1's GPUs are there
    assert "absl::InitializeLog" not in refused.stderr and "oneDNN" not in refused.stderr
    assert refused.stderr.count("\n") == (0 if refused.returncode == 0 else 1)


def test_native_info_lines_are_dropped_and_everything_else_is_kept(capfd):
    with filtered_native_logs():
        os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n")
        os.write(2, b"I0000 00:00:1795602290.142008    8734 port.cc:153] oneDNN custom operations are on.\n")
        os.write(2, b"E0000 00:00:1795602290.142008    8734 cuda_dnn.cc:8] Unable to register cuDNN factory\n")
        print("a Python warning", file=sys.stderr)
    # (Under pytest, sys.stderr is not file descriptor 2, so the two lines may come in either order.)
    assert sorted(capfd.readouterr().err.splitlines()) == [
        "E0000 00:00:1795602290.142008    8734 cuda_dnn.cc:8] Unable to register cuDNN factory", "a Python warning"]


# --- check -v -------------------------------------------------------------------------------


def test_check_verbose_tells_rules_of_one_kind_apart():
    ruleset = load_ruleset()
    metadata = [what_it_checks(rule) for rule in ruleset.rules if rule.check == "event_metadata"]
    assert len(metadata) > 1 and len(set(metadata)) == len(metadata)
    assert all(what_it_checks(rule) for rule in ruleset.rules)
    report = CheckReport("log", ruleset.version, [Finding(rule.check, "pass", [], what_it_checks(rule))
                                                  for rule in ruleset.rules])
    console = Console(width=250, record=True)
    console.print(report_table(report, verbose=True))
    shown = console.export_text()
    assert "key: eval_accuracy; fields: epoch_num, subset" in shown and "│ -" not in shown


def test_a_checked_logs_path_stays_one_line_over_a_narrow_table():
    """A passing log's table is one row ("all rules pass") under a title longer than it."""
    ruleset = load_ruleset()
    source = "runs/ds2-mini-torch-cpu-20261127-135822/mllog.log"
    report = CheckReport(source, ruleset.version, [Finding(rule.check, "pass", [], what_it_checks(rule))
                                                   for rule in ruleset.rules])
    console = Console(width=80, record=True)
    console.print(report_table(report))
    lines = console.export_text().splitlines()
    assert lines[0] == f"PASS {source} (rules {ruleset.version})"
    assert len(lines[0]) > len(lines[1])  # wider than the table under it

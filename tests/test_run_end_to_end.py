"""A real ds2-mini run with the PyTorch backend, from the CLI, to a loose target."""

from __future__ import annotations

import json
import stat

import pytest
from cli_helpers import run_ds2_mini
from official_checker import check_common_rules

from benchbase.atomic import current_umask
from benchbase.telemetry.cpu_features import best_isa, cpu_model, vector_extensions

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, small_store):
    out = tmp_path_factory.mktemp("runs") / "torch"
    return out, run_ds2_mini("torch", small_store, out, seed=3, target="paper_cer=88", max_epochs=25)


def test_the_run_reaches_its_target_and_says_so(finished_run):
    out, finished = finished_run
    assert finished.returncode == 0, finished.stderr[-2000:]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "success" and result["stop_reason"] == "targets_reached"
    assert result["tta"]["CER 88"]["seconds"] <= result["run_seconds"]
    assert result["last_evaluation"]["paper_cer"] <= 88
    assert "time to accuracy" in finished.stdout and "CER 88" in finished.stdout
    # The CPU is on the record: its vector extensions change both numerics and speed.
    assert result["cpu"]["model"] == cpu_model() and result["cpu"]["vector_extensions"] == vector_extensions()
    assert result["cpu"]["best_isa"] == best_isa() and isinstance(result["cpu"]["isa_caps"], dict)


def test_every_file_of_the_run_folder_has_the_umasks_permissions(finished_run):
    out, _ = finished_run
    expected = 0o666 & ~current_umask()
    modes = {str(path.relative_to(out)): stat.S_IMODE(path.stat().st_mode) for path in out.rglob("*") if path.is_file()}
    assert modes and all(mode == expected for mode in modes.values()), modes


def test_the_run_folder_holds_every_output(finished_run):
    out, _ = finished_run
    config = json.loads((out / "config.json").read_text())
    assert config["workload"]["name"] == "ds2-mini" and config["seed"] == 3
    # The software environment on record, the same in config.json, the log and result.json.
    environment = config["environment"]
    assert environment["packages"]["torch"] and environment["python"] and environment["cpu"]["model"]
    assert environment["backend_distribution"].startswith("benchbase-torch-ds2 ")
    assert json.loads((out / "result.json").read_text())["environment"] == environment
    logged = [json.loads(line.split(" ", 1)[1]) for line in (out / "mllog.log").read_text().splitlines()]
    assert [event["value"] for event in logged if event["key"] == "benchbase_environment"] == [environment]
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [line for line in lines if line["kind"] == "eval"]
    batches = [line for line in lines if line["kind"] == "batch"]
    assert evals and all(b["throughput"] > 0 for b in batches)
    assert (out / "telemetry.jsonl").read_text().count("\n") > 10
    assert list((out / "decoded").glob("dev-clean-epoch-*.jsonl"))
    result = json.loads((out / "result.json").read_text())
    assert result["telemetry"]["cpu_percent_mean"] > 0 and result["telemetry"]["gpu_status"]


def test_the_run_passes_check_and_renders_table_5(finished_run, tmp_path):
    from cli_helpers import run_benchbase

    out, _ = finished_run
    checked = run_benchbase("check", str(out))
    assert checked.returncode == 0, checked.stdout[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert list(result["final_evaluation"]["subsets"]) == ["dev-clean", "dev-other", "test-clean", "test-other"]
    reported = run_benchbase("report", str(out), "--out", str(tmp_path / "report"), "--no-figures")
    assert reported.returncode == 0, reported.stderr[-2000:]
    table = (tmp_path / "report" / "report.md").read_text()
    assert "final WER on every subset (the paper's Table 5" in table and "test-other" in table


def test_verify_re_measures_the_final_weights(finished_run, tmp_path):
    import shutil

    from cli_helpers import run_benchbase

    out, _ = finished_run
    verified = run_benchbase("verify", str(out))
    assert verified.returncode == 0, verified.stdout + verified.stderr[-2000:]
    assert "verified against the final evaluation" in verified.stdout
    # A log and result.json edited together: the checkpoint still scores what it scored.
    copy = tmp_path / "edited"
    shutil.copytree(out, copy)
    log = copy / "mllog.log"
    lines = log.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "benchbase_final_accuracy" in line and '"dev-clean"' in line)
    event = json.loads(lines[at].split(" ", 1)[1])
    event["value"]["wer"] = max(0.0, event["value"]["wer"] - 20)
    lines[at] = ":::MLLOG " + json.dumps(event) + "\n"
    log.write_text("".join(lines))
    refuted = run_benchbase("verify", str(copy))
    assert refuted.returncode == 1 and "do not score what the final evaluation" in refuted.stdout


def test_decode_sweep_refuses_a_corrupt_checkpoint_and_unbounded_beams(finished_run, tmp_path):
    import shutil

    from cli_helpers import run_benchbase

    out, _ = finished_run
    copy = tmp_path / "corrupt"
    shutil.copytree(out, copy)
    (copy / "checkpoints" / "final.ckpt").write_bytes(b"\x00" * 100)
    refused = run_benchbase("decode-sweep", str(copy), "--beams", "4")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith(
        f"benchbase: error: {copy / 'checkpoints' / 'final.ckpt'}: not a checkpoint this backend can load")
    unbounded = run_benchbase("decode-sweep", str(out), "--beams", "64,100000")
    assert unbounded.returncode == 2 and "expected widths from 1 to 8192" in unbounded.stderr


def test_the_compliance_log_passes_the_official_common_rules(finished_run, tmp_path):
    out, _ = finished_run
    passed, messages = check_common_rules(out / "mllog.log", tmp_path)
    assert passed, messages


def test_the_official_checker_catches_a_broken_log(finished_run, tmp_path):
    out, _ = finished_run
    broken = tmp_path / "broken.log"
    broken.write_text("".join(line for line in (out / "mllog.log").read_text().splitlines(keepends=True)
                              if '"run_stop"' not in line))
    passed, _ = check_common_rules(broken, tmp_path)
    assert not passed


def test_the_compliance_log_records_the_lifecycle_in_order(finished_run):
    out, _ = finished_run
    events = [json.loads(line.split(" ", 1)[1]) for line in (out / "mllog.log").read_text().splitlines()]
    keys = [event["key"] for event in events]
    assert keys.index("init_stop") < keys.index("run_start") < keys.index("epoch_start") < keys.index("run_stop")
    assert keys.count("run_stop") == 1
    assert events[keys.index("run_stop")]["metadata"]["status"] == "success"
    accuracies = [event for event in events if event["key"] == "eval_accuracy"]
    assert all("epoch_num" in event["metadata"] and "cer" in event["value"] for event in accuracies)
    hyper = {event["key"]: event["value"] for event in events}
    assert (hyper["opt_name"], hyper["opt_base_learning_rate"], hyper["seed"]) == ("adadelta", 1.0, 3)
    assert hyper["global_batch_size"] == 32


def test_runs_n_writes_seeded_runs_into_one_folder_and_exits_3_when_aborted(tmp_path, small_store):
    from cli_helpers import run_benchbase

    out = tmp_path / "series"
    finished = run_benchbase("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu", "--data",
                             str(small_store), "--out", str(out), "--seed", "5", "--runs", "2", "--max-epochs", "1",
                             "--target", "paper_cer=1", timeout=600)
    assert finished.returncode == 3, finished.stderr[-2000:]  # a target no run reaches in one epoch
    seeds = [json.loads((out / f"run-{i}" / "config.json").read_text())["seed"] for i in range(2)]
    assert seeds == [5, 6]
    statuses = [json.loads((out / f"run-{i}" / "result.json").read_text())["status"] for i in range(2)]
    assert statuses == ["aborted", "aborted"]

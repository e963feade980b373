"""Independent scoring: predict() held to the weights the backend exports, by benchbase's reference.

A real PyTorch run on the small store (the honest backend agrees at every evaluation), a
subclass whose predict() nudges one symbol (it stops the run, prediction_mismatch), the
checker's rule on edited copies of the honest run, and `benchbase verify` re-scoring the
exported weights without loading any backend code.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_benchbase

from benchbase.backend import Batch
from benchbase.compliance.checker import check_log
from benchbase.compliance.parse import parse_log_text
from benchbase.harness import run_benchmark
from benchbase.harness.independent_scoring import UtteranceSample
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.specs import RunConfig

needs_torch = pytest.mark.skipif(importlib.util.find_spec("benchbase_torch_ds2") is None,
                                 reason="needs the torch backend")


def _batch(ids: list[str]) -> Batch:
    frames = 20
    return Batch(features=np.zeros((len(ids), frames, 3), np.float32),
                 feature_lengths=np.full(len(ids), frames, np.int32), output_lengths=np.full(len(ids), 5, np.int32),
                 labels=np.zeros((len(ids), 1), np.int32), label_lengths=np.ones(len(ids), np.int32),
                 utterance_ids=tuple(ids), transcripts=tuple("a" for _ in ids))


def _stream(sample: UtteranceSample, count: int, subset: str = "dev-clean") -> None:
    for start in range(0, count, 7):  # batches of 7, the last one smaller
        ids = [f"u{index}" for index in range(start, min(count, start + 7))]
        sample(subset, _batch(ids), np.zeros((len(ids), 5, 4), np.float32))


def test_the_sample_is_uniform_over_the_stream_and_replays_from_its_seed():
    counts: Counter[str] = Counter()
    for seed in range(2000):
        sample = UtteranceSample("dev-clean", 4, seed=seed)
        _stream(sample, 20)
        kept = [item.outputs.utterance_id for item in sample.kept]
        assert len(kept) == len(set(kept)) == 4
        assert [item.position for item in sample.kept] == sorted(int(name[1:]) for name in kept)
        counts.update(kept)
    # Each of 20 utterances is kept with probability 4/20: 400 of 2000 draws, binomial sd 17.9.
    assert all(abs(count - 400) < 5 * 17.9 for count in counts.values()) and len(counts) == 20
    first, again = UtteranceSample("dev-clean", 4, seed=11), UtteranceSample("dev-clean", 4, seed=11)
    _stream(first, 20)
    _stream(again, 20)
    assert [item.outputs.utterance_id for item in first.kept] == [item.outputs.utterance_id for item in again.kept]


def test_the_sample_keeps_only_its_subset_and_everything_when_unbounded():
    sample = UtteranceSample("dev-clean", None)
    _stream(sample, 9, subset="dev-other")
    _stream(sample, 9)
    assert [item.outputs.utterance_id for item in sample.kept] == [f"u{index}" for index in range(9)]
    assert sample.seed.bit_length() <= 63 and UtteranceSample("dev-clean", 3).seed != sample.seed


def _line(time_ms: int, key: str, event_type: str = "POINT_IN_TIME", **metadata) -> str:
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": time_ms, "event_type": event_type, "key": key,
                                     "value": None, "metadata": metadata})


def test_the_run_clock_leaves_out_the_off_clock_intervals():
    log = parse_log_text("\n".join([
        _line(1_000, "run_start", "INTERVAL_START"),
        _line(11_000, "benchbase_off_clock", "INTERVAL_START", epoch_num=1),
        _line(14_000, "benchbase_off_clock", "INTERVAL_END", epoch_num=1),
        _line(21_000, "eval_stop", "INTERVAL_END", epoch_num=2),
    ]))
    assert log.run_clock(11_000) == 10.0
    assert log.run_clock(12_000) == 10.0  # inside the interval, the clock stands still
    assert log.run_clock(21_000) == 17.0


class NudgingBackend:
    """predict() adds 0.5 to the apostrophe's log-probability before normalizing: a small lie,
    dozens of times the rounding tolerance, that makes no transcript and breaks no shape."""

    @staticmethod
    def make(base: type) -> type:
        class Nudging(base):
            def predict(self, inputs):
                log_probs = super().predict(inputs).astype(np.float64)
                log_probs[..., 27] += 0.5
                log_probs -= np.log(np.exp(log_probs).sum(axis=-1, keepdims=True))
                return log_probs.astype(np.float32)
        return Nudging


def _torch_run(out: Path, store: Path, backend_class: type | None = None, max_epochs: int = 2) -> dict:
    manager = get_plugin_manager()
    registry = collect_registry(manager)
    workload = registry.workload("ds2-mini").model_copy(update={"max_epochs": max_epochs})
    config = RunConfig(workload=workload, backend="torch", hardware=registry.profile("cpu"), seed=0, out=out,
                       data=store)
    try:
        run_benchmark(config, manager, backend_class or registry.backend("torch"))
    except Exception as error:  # noqa: BLE001 - the run's end is what the test reads
        return {"error": error}
    return {}


@pytest.fixture(scope="module")
def honest_run(tmp_path_factory, small_store) -> Path:
    pytest.importorskip("benchbase_torch_ds2")
    out = tmp_path_factory.mktemp("independent") / "run"
    assert _torch_run(out, small_store) == {}
    return out


def _copy(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    return copy


def _rewrite_events(run: Path, edit) -> None:
    log = run / "mllog.log"
    lines = [json.loads(line.split(" ", 1)[1]) for line in log.read_text().splitlines()]
    log.write_text("".join(":::MLLOG " + json.dumps(event) + "\n" for event in edit(lines)))


def _independent_finding(run: Path) -> dict:
    registry = collect_registry(get_plugin_manager(load_entrypoints=False))
    report = check_log(run / "mllog.log", workloads=registry.workloads)
    [finding] = [finding for finding in report.findings if finding.rule == "independent_scoring"]
    return {"status": finding.status, "messages": finding.messages}


@needs_torch
def test_an_honest_run_is_scored_independently_and_passes(honest_run):
    assert _independent_finding(honest_run) == {"status": "pass", "messages": []}


@needs_torch
def test_a_disagreement_a_missing_score_or_other_weights_fail_the_rule(honest_run, tmp_path):
    def disagree(events):
        for event in events:
            if event["key"] == "benchbase_independent_score" and event["metadata"].get("epoch_num") == 2:
                event["value"].update(agree=False, disagreeing=["dev-clean-1"])
        return events

    copy = _copy(honest_run, tmp_path / "a")
    _rewrite_events(copy, disagree)
    assert any("disagreed with the exported weights on 1 of 8" in message
               for message in _independent_finding(copy)["messages"])
    copy = _copy(honest_run, tmp_path / "b")
    _rewrite_events(copy, lambda events: [event for event in events if not (
        event["key"] == "benchbase_independent_score" and event["metadata"].get("epoch_num") == 1)])
    assert any("the evaluation of epoch 1 has no independent score" in message
               for message in _independent_finding(copy)["messages"])
    copy = _copy(honest_run, tmp_path / "c")
    weights = copy / "checkpoints" / "final.weights.npz"
    with np.load(weights) as archive:
        arrays = {name: archive[name] for name in archive.files}
    arrays["output.bias"] = arrays["output.bias"] + 1.0
    np.savez(weights, **arrays)
    assert _independent_finding(copy)["messages"] == [
        f"line {_line_of(copy, 'benchbase_exported_weights')}: checkpoints/final.weights.npz is not the file the "
        "log names (sha256 differs)"]
    refused = run_benchbase("verify", str(copy))
    assert refused.returncode == 2 and "not the exported weights the log names (sha256 differs)" in refused.stderr


def _line_of(run: Path, key: str) -> int:
    lines = (run / "mllog.log").read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if f'"key": "{key}"' in line)


@needs_torch
def test_verify_re_scores_the_exported_weights_without_any_backend_code(honest_run):
    # -X importtime lists every module the process imported, on stderr.
    verified = run_benchbase("verify", str(honest_run), env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert verified.returncode == 0, verified.stdout + verified.stderr[-2000:]
    assert "independent: re-scored by the reference model" in verified.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in verified.stderr.splitlines() if "import time:" in line}
    assert "benchbase.families.ds2.reference" in imported
    assert not {name for name in imported if name.split(".")[0] in ("torch", "benchbase_torch_ds2")}
    digest = hashlib.sha256((honest_run / "checkpoints" / "final.weights.npz").read_bytes()).hexdigest()
    assert f'"sha256": "{digest}"' in (honest_run / "mllog.log").read_text()


@needs_torch
def test_a_predict_that_does_not_follow_its_weights_stops_the_run(tmp_path, small_store):
    from benchbase_torch_ds2.backend import TorchBackend

    out = tmp_path / "run"
    ended = _torch_run(out, small_store, NudgingBackend.make(TorchBackend), max_epochs=3)
    assert "predict() does not match the exported weights on 8 of 8 utterances of dev-clean" in str(ended["error"])
    result = json.loads((out / "result.json").read_text()) if (out / "result.json").exists() else None
    events = [json.loads(line.split(" ", 1)[1]) for line in (out / "mllog.log").read_text().splitlines()]
    [stop] = [event for event in events if event["key"] == "run_stop"]
    assert stop["metadata"]["status"] == "aborted" and stop["metadata"]["stop_reason"] == "prediction_mismatch"
    assert [event["metadata"]["epoch_num"] for event in events if event["key"] == "eval_accuracy"] == [1, 1]
    assert result is None  # stopped by an error: no result.json claims a score
    messages = _independent_finding(out)["messages"]
    assert any("the run stopped because PredictionMismatch" in message for message in messages), messages

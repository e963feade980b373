"""benchmarks/gpu_bundle.py's own arithmetic and files, which decide what a GPU machine runs: the
batch it fits to the GPU's memory, the timing workload for a batch beyond the corpus, the table of
a run folder that is not one of its own. No GPU needed."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest
import yaml
from benchmark_scripts import load_benchmark

from benchbase.data.store import FeatureStore
from benchbase.specs.workload import WorkloadSpec
from benchbase.specs.yaml_files import load_spec_file

gpu_bundle = load_benchmark("gpu_bundle")

H200_MIB = 143_771.0  # NVML's total on the H200 of docs/BENCHMARKS.md
CONFORMER_BF16_PEAKS = [(32, 11_904.0), (256, 63_536.0)]
"""Peak GPU MiB NVML saw for the torch Conformer in bf16 on the H200 at batches 32 and 256
(docs/BENCHMARKS.md, "The GPU path on one H200")."""


def test_the_fitted_batch_is_the_largest_multiple_of_8_the_line_puts_under_the_headroom():
    batch, how = gpu_bundle.batch_for_memory(CONFORMER_BF16_PEAKS, H200_MIB)
    slope = (63_536 - 11_904) / (256 - 32)
    fixed = 11_904 - 32 * slope
    limit = (1 - gpu_bundle.FIT_HEADROOM) * H200_MIB
    assert batch % 8 == 0
    assert fixed + slope * batch <= limit < fixed + slope * (batch + 8)
    assert "[32, 256]" in how and "94% of 143771 MiB" in how


def test_a_least_squares_line_takes_every_run_at_its_batch():
    # Three runs on one line, two of them at the same batch with peaks either side of it.
    points = [(32, 11_904.0), (256, 63_536.0 + 100), (256, 63_536.0 - 100)]
    assert gpu_bundle.batch_for_memory(points, H200_MIB)[0] == gpu_bundle.batch_for_memory(
        CONFORMER_BF16_PEAKS, H200_MIB)[0]


@pytest.mark.parametrize(("points", "why"), [
    ([(32, 11_904.0)], "two batches"),
    ([], "two batches"),
    ([(32, 11_904.0), (64, 11_000.0)], "do not grow"),
])
def test_no_batch_is_fitted_from_runs_that_fix_no_rising_line(points, why):
    batch, how = gpu_bundle.batch_for_memory(points, H200_MIB)
    assert batch is None and why in how


def test_a_gpu_too_small_for_the_fixed_part_fits_nothing():
    assert gpu_bundle.batch_for_memory(CONFORMER_BF16_PEAKS, 4_000.0)[0] is None


def test_without_a_gpu_nothing_is_fitted(tmp_path):
    assert gpu_bundle.fitted_batch(tmp_path, "torch", "conformer", "bf16", "cpu") == (None, "no GPU: nothing to fit")


def _timing_run(out: Path, name: str, batch: int, peak_mib: float | None) -> None:
    """A run folder as `gpu_bundle.py run` leaves one: a recorded run's config at ``batch``, four
    steps, and the peak GPU memory NVML saw."""
    recorded = Path(__file__).parent / "data" / "rcp-conformer-mini" / "torch-cpu" / "seed-0"
    folder = out / name
    folder.mkdir(parents=True)
    config = json.loads((recorded / "config.json").read_text())
    config["hardware"]["pipeline"] |= {"global_batch": batch, "batch_per_device": batch}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "result.json").write_text(json.dumps({"status": "aborted", "telemetry": {"peak_gpu_mem_mb": peak_mib}}))
    steps = [{"kind": "batch", "epoch": 1, "batch": step, "loss": 9.0, "step_s": 0.05, "wait_s": 0.0}
             for step in range(1, 5)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(step) + "\n" for step in steps))


def test_the_fit_reads_the_plain_runs_of_its_backend_workload_and_precision(tmp_path, monkeypatch):
    from benchbase.telemetry import hardware_detect

    h200 = hardware_detect.DetectedGpu(name="NVIDIA H200", memory_gb=H200_MIB * 2**20 / 1e9, pcie="", nvlinks=0)
    monkeypatch.setattr(hardware_detect, "detected_gpus", lambda: ([h200], "GPUs via NVML"))
    for (batch, peak), name in zip(CONFORMER_BF16_PEAKS, ("torch-conformer-bf16-b32", "torch-conformer-bf16-b256")):
        _timing_run(tmp_path, name, batch, peak)
    # Not points of the line: a lever's run, another precision's, another backend's, one without NVML.
    _timing_run(tmp_path, "torch-conformer-bf16-b128-nchw", 128, 99_000.0)
    _timing_run(tmp_path, "torch-conformer-fp32-b128", 128, 99_000.0)
    _timing_run(tmp_path, "jax-conformer-bf16-b128", 128, 99_000.0)
    _timing_run(tmp_path, "torch-conformer-bf16-b64", 64, None)
    assert gpu_bundle.fitted_batch(tmp_path, "torch", "conformer", "bf16", "cuda") == gpu_bundle.batch_for_memory(
        CONFORMER_BF16_PEAKS, H200_MIB)
    assert gpu_bundle.fitted_batch(tmp_path, "torch", "ds2", "bf16", "cuda")[0] is None


def test_a_batch_beyond_half_the_training_subset_reads_it_more_often(tmp_path, conformer_store):
    gpu_bundle.write_timing_workload(tmp_path / "workloads", "conformer", 400)
    (tmp_path / "stores").mkdir()
    (tmp_path / "stores" / "conformer-features").symlink_to(conformer_store)
    args = argparse.Namespace(dir=tmp_path, out=tmp_path / "out")
    training = FeatureStore(conformer_store).utterance_count(["train"])
    prepared = tmp_path / "workloads" / "conformer-gpu-timing.yaml"
    assert gpu_bundle.timing_workload(args, "conformer", "conformer-features", training // 2) == prepared
    batch = 2 * training - 1  # two steps an epoch need the subset 4 times
    spec = load_spec_file(WorkloadSpec, gpu_bundle.timing_workload(args, "conformer", "conformer-features", batch))
    assert spec.data.train == ("train",) * 4
    assert any(deviation.field == "data.train" and str(batch) in deviation.why for deviation in spec.deviations)
    unchanged = yaml.safe_load(prepared.read_text())
    assert unchanged["data"]["train"] == ["train"]


def test_the_table_of_a_run_that_pads_to_each_batch_has_no_mfu(tmp_path):
    """A run folder of a registered workload, not a timing one: no fixed padding, so no FLOP count."""
    run = Path(__file__).parent / "data" / "rcp-conformer-mini" / "torch-cpu" / "seed-0"
    shutil.copytree(run, tmp_path / "seed-0")
    batches = [{"kind": "batch", "epoch": 1, "batch": step, "loss": 100.0 - step, "step_s": 0.5, "wait_s": 0.01}
               for step in range(1, 5)]
    (tmp_path / "seed-0" / "metrics.jsonl").write_text("".join(json.dumps(batch) + "\n" for batch in batches))
    table = gpu_bundle.summarize(tmp_path)
    row = next(line for line in table.splitlines() if line.startswith("| seed-0"))
    assert "| 500.0 (500.0-500.0) |" in row and "| - | - |" in row


def test_an_out_of_memory_failure_is_told_from_others(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("benchbase: error: backend 'torch' failed in train_step(): OutOfMemoryError: CUDA out of memory. "
                   "Tried to allocate 2.00 GiB\n")
    assert gpu_bundle.ran_out_of_memory(log)
    log.write_text("benchbase: error: backend 'torch' failed in train_step(): RuntimeError: shape mismatch\n")
    assert not gpu_bundle.ran_out_of_memory(log)
    assert not gpu_bundle.ran_out_of_memory(tmp_path / "missing.log")


@pytest.mark.parametrize("runs", ["torch:conformer:bf16:abc", "torch:ds2-mini:bf16:32", "torch:conformer",
                                  "torch:conformer:bf16:32,torch:conformer:bf16:"])
def test_a_misspelled_run_is_one_line_before_any_run_starts(tmp_path, runs):
    args = argparse.Namespace(dir=tmp_path, out=tmp_path / "out", runs=runs)
    with pytest.raises(SystemExit, match=r"^gpu_bundle.py run: --runs '[^']*': expected BACKEND:WORKLOAD"):
        gpu_bundle.run(args)
    assert not args.out.exists()


def _registered(name: str) -> WorkloadSpec:
    from benchbase.plugin_host import get_plugin_manager
    from benchbase.plugin_host.registry import collect_registry

    return collect_registry(get_plugin_manager(load_entrypoints=False)).workload(name)


def test_the_long_corpus_text_makes_the_transducers_pieces():
    """The long corpus's lines: LONG_WORDS words the alphabet spells, enough of them (benchbase's
    docs) for rnnt's 1023 pieces, which the few dozen lines that are spoken cannot make."""
    from benchbase.data.alphabet import normalize_transcript
    from benchbase.data.vocabulary import PieceVocabulary, train_pieces
    from benchbase.errors import InputError

    lines = gpu_bundle.long_lines(gpu_bundle.LONG_WORDS)
    assert len(lines) > 1000 and {len(line.split()) for line in lines} == {gpu_bundle.LONG_WORDS}
    assert all(normalize_transcript(line) == line for line in lines)
    pieces = _registered("rnnt").data.tokens
    assert PieceVocabulary(train_pieces(lines, pieces)).symbols == 1024
    with pytest.raises(InputError, match="cannot make 1023 (unigram )?pieces from 40 training transcripts"):
        train_pieces(lines[:40], pieces)


def test_the_transducers_timing_workload_keeps_its_pieces(tmp_path):
    rnnt = load_spec_file(WorkloadSpec, gpu_bundle.write_timing_workload(tmp_path, "rnnt", 40, pieces=True))
    assert rnnt.data.tokens == _registered("rnnt").data.tokens and rnnt.model.symbols == 1024
    assert rnnt.data.pad_to_frames == gpu_bundle.PAD_FRAMES and "long synthetic corpus" in rnnt.deviations[0].benchbase
    ds2 = load_spec_file(WorkloadSpec, gpu_bundle.write_timing_workload(tmp_path, "ds2", 400))
    assert ds2.data.tokens.kind == "characters" and ds2.model.symbols == 30


def test_the_transducers_flops_count_the_stores_mean_labels(tmp_path, small_store):
    """The lattice's FLOPs grow with the labels: counted at the training utterances' mean, from the
    store the run read; not counted where that store is not at hand."""
    from benchbase.families.rnnt import cost
    from benchbase.specs.model import validate_model
    from benchbase.specs.workload import FeatureSpec

    workload = yaml.safe_load(gpu_bundle.write_timing_workload(tmp_path, "rnnt", 40, pieces=True).read_text())
    config = {"workload": workload, "data": str(small_store), "hardware": {"pipeline": {"batch_per_device": 64}}}
    store = FeatureStore(small_store)
    labels = [len(utterance.labels) for shard in store.shards(["train"]) for utterance in store.read(shard)]
    model, dimension = validate_model(workload["model"]), FeatureSpec.model_validate(workload["features"]).dimension
    per_utterance = [cost.total_forward_flops(cost.forward_flops(model, dimension, gpu_bundle.PAD_FRAMES, count))
                     for count in labels]
    expected = cost.TRAINING_FACTOR * 64 * sum(per_utterance) / len(per_utterance)
    assert gpu_bundle.training_flops(config) == pytest.approx(expected, rel=1e-12)
    assert gpu_bundle.training_flops({**config, "data": str(tmp_path / "elsewhere")}) is None

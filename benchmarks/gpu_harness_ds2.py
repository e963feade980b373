"""The full ds2 model through the harness on one GPU: `benchbase run`, not a bare loop.

benchmarks/gpu_ds2.py times ``train_step()`` on random batches; this script times what a real run
spends: `benchbase run` of the paper's full model (25.6M parameters) at sys10's per-device batch
of 150, every utterance padded to the paper's 1670 frames, with the harness's pipeline, clock,
evaluations (word beam search, width 256) and telemetry. No LibriSpeech is needed: the data is a
synthetic corpus benchbase makes, so the runs time the machine, not accuracy (the targets are
never reached; each run stops at its epoch limit).

Three steps, each a subcommand:

    # here (benchbase and its data extras installed): a store, the workload and profile files,
    # dist-info entries for a machine where nothing is pip-installed, a snapshot of HEAD's code
    python benchmarks/gpu_harness_ds2.py prepare --dir .gpu27 --snapshot
    # a machine without benchbase's dependencies and without a network also needs their wheels in
    # DIR/whl (cp312, `pip download --no-deps`: pydantic, pydantic-core, annotated-types,
    # typing-inspection, typing-extensions, jiwer, rapidfuzz, mlperf-logging, librosa, soundfile,
    # cffi, pycparser), installed there with `pip install --no-index --target /tmp/site`, and
    # PYTHONPATH=/tmp/site:DIR/src:DIR/src/plugins/torch_ds2:DIR/site

    # on the GPU machine: one `benchbase run` per precision and lever, each its own process, a
    # host-to-device copy probe first; then the table (also written to OUT/summary.md)
    python benchmarks/gpu_harness_ds2.py run --dir .gpu27 --out OUT --device cuda \
        --runs bf16:none,bf16:cuda_graph,bf16:pinned+cuda_graph,fp32:none,fp32:pinned --archive runs.tgz

    python benchmarks/gpu_harness_ds2.py summarize OUT      # the table again, from the run folders

    # a smoke test without a GPU: a small model and batch, on the CPU (the levers are no-ops there)
    python benchmarks/gpu_harness_ds2.py run --dir .gpu27 --out /tmp/h --device cpu --tiny --epochs 1 --runs fp32:none

The results of 2026-11-26 are in docs/BENCHMARKS.md, "Full ds2 through the harness on one H100".

Levers are applied inside the run's own process before the harness starts (``child``), so the
baseline is the backend as it is in the tree and each lever is measured on its own:

- ``none``: the backend as it is.
- ``pinned``: the torch backend copies a batch's features to the GPU from page-locked memory
  (``pin_memory()`` inside ``train_step``, then a non-blocking copy).
- ``pinned_pipeline``: the harness's pipeline pads each batch's features straight into
  page-locked memory in its producer thread, so the copy inside ``train_step`` is a DMA that
  needs no staging (a change to benchbase/data/pipeline.py, measured here, not made).
- ``cudnn_benchmark``: ``torch.backends.cudnn.benchmark = True`` (cuDNN times its convolution
  algorithms for each shape and keeps the fastest).
- ``cuda_graph``: the network's training forward and backward captured once into a CUDA graph
  (``torch.cuda.make_graphed_callables``) and replayed every step; CTC and the optimizer stay
  eager (see ``capture_graph``).
- ``frame_norm``: the BatchNorm after each LSTM normalizes the LSTM's (batch x frames, channels)
  output as it lies, instead of a (batch, channels, frames) transposed view, which costs copies and
  a BatchNorm backward over strided memory; the same statistics, summed in another order.
  The backend's model normalizes this way since f0ed39a; the lever reproduces the measurement on
  a snapshot of the code before it.

LEVER+LEVER applies several.

FLOPs are those of benchbase.families.ds2.cost, as in benchmarks/gpu_ds2.py: 51.2 MFLOP forward
per conv output frame of ds2, a training step 3x that, 153.7 MFLOP per padded frame, 830 padded
frames per utterance. MFU divides by the H100 SXM's dense peaks: 67 TFLOP/s FP32 (CUDA cores) and
989 TFLOP/s BF16.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
from pathlib import Path

from benchbase.families.ds2.cost import TRAINING_FACTOR, forward_flops, total_forward_flops
from benchbase.specs.model import validate_model
from benchbase.specs.workload import FeatureSpec

REPO = Path(__file__).resolve().parent.parent

WORKLOAD_FILE = "ds2-harness-timing.yaml"
PROFILE_FILE = "h100-sys10.yaml"
STORE = "store"
SUBSETS = ("train", "dev-clean", "dev-other", "test-clean", "test-other")
LEVERS = ("none", "pinned", "pinned_pipeline", "cudnn_benchmark", "cuda_graph", "frame_norm")
PEAKS = {"fp32": 67e12, "tf32": 495e12, "bf16": 989e12, "fp16": 989e12}
"""H100 SXM dense peaks (NVIDIA datasheet; dense = half the sparse figure): FP32 on the CUDA cores,
TF32 and BF16/FP16 on the tensor cores."""
FP32_PEAK = PEAKS["fp32"]
LOSS_STEPS_COMPARED = 3
SMALL_FILES = ("config.json", "mllog.log", "metrics.jsonl", "result.json", "telemetry.jsonl", "run.log",
               "summary.json", "profile-summary.json")
TINY = ("--set", "workload.model.conv_channels=32", "--set", "workload.model.lstm_units=32",
        "--set", "workload.model.lstm_layers=1", "--set", "hardware.pipeline.global_batch=64",
        "--set", "hardware.pipeline.batch_per_device=64", "--set", "workload.evaluation.beam_width=16")

# The workload: ds2.yaml's model, features, optimizer and evaluation decoder, with the synthetic
# subsets, the paper's fixed padding, one evaluation at the end of each run and a time cap.
WORKLOAD = """\
# ds2 (the paper's full model) on benchbase's synthetic corpus, for timing the GPU path through
# the harness (benchmarks/gpu_harness_ds2.py; docs/BENCHMARKS.md, "Full ds2 through the harness on
# one H100"). Not a time-to-accuracy workload: a few epochs of a small corpus, targets unreachable.
name: ds2-harness-timing
description: The paper's DS2 (25.6M parameters) on the synthetic corpus, padded to 1670 frames; GPU timing only.
reference: the ds2 workload
model:
  conv_channels: 600
  conv_width: 11
  conv_stride: 2
  conv_activation: clipped_relu
  lstm_layers: 5
  lstm_units: 800
  dropout: 0.05
features:
  sample_rate: 16000
  window: 512
  hop: 160
  mel_bands: 80
  mfcc: 13
data:
  dataset: synthetic
  train: [train]
  dev: [dev-clean, dev-other]
  test: [test-clean, test-other]
  max_duration: 16.7
  # As the paper (and ds2): every utterance padded to 1670 frames, so each step is paper-shaped.
  pad_to_frames: 1670
  synthetic_utterances: {utterances}
optimizer:
  name: adadelta
  learning_rate: 1.0
  rho: 0.95
  epsilon: 1.0e-8
evaluation:
  # As ds2: every epoch, word beam search at width 256. (The harness starts the next epoch's
  # readers while an epoch is evaluated; without an evaluation between two epochs, each epoch's
  # first batch waits for its readers, which on this small corpus is most of the data wait.)
  every_epochs: 1
  decoder: word_beam
  beam_width: 256
  lm_mode: bigrams
  lm_alpha: 0.5
  lm_beta: 0.0
  # Off: the reference model's re-scoring runs off the clock but costs GPU time.
  independent_utterances: 0
tta:
  subset: dev-clean
  window: 3
  targets:
    - {{metric: paper_cer, value: 10}}
    - {{metric: wer, value: 22}}
max_epochs: {epochs}
max_minutes: 5
deviations:
  - field: data
    reference: LibriSpeech 960 h (ds2)
    benchbase: the synthetic corpus ({utterances} utterances), every utterance padded to 1670 frames as in ds2
    why: A timing run of the GPU path on a machine without LibriSpeech; the padding fixes the work per step.
  - field: evaluation.independent_utterances
    reference: 4 (ds2)
    benchbase: "0"
    why: Independent scoring runs off the clock but costs minutes of GPU time.
"""

# sys10's input pipeline (Table 2: 16 readers, 100 batches prefetched) with its per-device batch of
# 150, on one GPU: the global batch is one device's.
PROFILE = """\
# sys10's pipeline and per-device batch on one GPU (benchmarks/gpu_harness_ds2.py).
name: h100-sys10
description: One NVIDIA H100 80GB HBM3 with sys10's per-device batch (150) and input pipeline.
devices:
  kind: gpu
  count: 1
  model: NVIDIA H100 80GB HBM3
  memory_gb: 80
cpu:
  model: the GPU machine's host CPU
  cores: 16
  threads: 16
  ram_gb: 128
pipeline:
  global_batch: 150
  batch_per_device: 150
  readers: 16
  buffer: 100
"""


# ---------------------------------------------------------------------------------------------- prepare

def prepare(args: argparse.Namespace) -> None:
    directory = args.dir
    directory.mkdir(parents=True, exist_ok=True)
    corpus = args.corpus or Path(tempfile.gettempdir()) / "benchbase-gpu-harness-corpus"
    store = directory / STORE
    benchbase = [sys.executable, "-m", "benchbase"]
    if not (store / "store.json").exists():
        if not (corpus / "train").exists():
            subprocess.run([*benchbase, "data", "synth", "--out", str(corpus), "--utterances", str(args.utterances)],
                           check=True)
        subprocess.run([*benchbase, "data", "prepare", "--librispeech", str(corpus), "--subsets", ",".join(SUBSETS),
                        "--workload", "ds2", "--out", str(store)], check=True)
    (directory / WORKLOAD_FILE).write_text(WORKLOAD.format(utterances=args.utterances, epochs=args.epochs))
    (directory / PROFILE_FILE).write_text(PROFILE)
    write_dist_info(directory / "site")
    if args.snapshot:
        snapshot = directory / "src"
        snapshot.mkdir(exist_ok=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD", "benchbase", "plugins/torch_ds2",
                                  "hardware_profiles"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(snapshot)], input=archive, check=True)
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], check=True, capture_output=True,
                                text=True).stdout.strip()
        (snapshot / "COMMIT").write_text(commit + "\n")
    size = sum(path.stat().st_size for path in store.rglob("*") if path.is_file())
    print(f"prepared {directory}: {store} ({size / 1e6:.1f} MB)")


def write_dist_info(site: Path) -> None:
    """Metadata that lets importlib.metadata find benchbase and the torch backend's entry point
    where neither is pip-installed (the code itself on PYTHONPATH)."""
    for name, version, entry_points in (("benchbase", "0.2.0", ""),
                                        ("benchbase_torch_ds2", "0.1.0",
                                         "[benchbase]\ntorch = benchbase_torch_ds2.plugin\n")):
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n")
        if entry_points:
            (info / "entry_points.txt").write_text(entry_points)


# ---------------------------------------------------------------------------------------------- levers

def apply_lever(lever: str) -> None:
    """Change one thing in this process before the harness starts (see the module docstring);
    LEVER+LEVER applies several."""
    if "+" in lever:
        for part in lever.split("+"):
            apply_lever(part)
        return
    if lever == "none":
        return
    import torch

    if lever == "cudnn_benchmark":
        torch.backends.cudnn.benchmark = True
    elif lever == "pinned":
        from benchbase_torch_ds2 import backend

        def pinned_tensor(self, array):
            tensor = torch.from_numpy(array)
            if self.device.type == "cuda" and tensor.nbytes >= 1 << 20:
                tensor = tensor.pin_memory()
            return tensor.to(self.device, non_blocking=True)

        backend.TorchBackend._tensor = pinned_tensor
    elif lever == "pinned_pipeline":
        from benchbase.data import pipeline

        padded = pipeline.pad_batch

        def pinned_pad_batch(utterances, model, pad_to_frames=None):
            batch = padded(utterances, model, pad_to_frames)
            if not torch.cuda.is_available():
                return batch
            staged = torch.empty(batch.features.shape, dtype=torch.float32, pin_memory=True)
            staged.numpy()[...] = batch.features  # in the producer thread, off the training step
            return dataclasses.replace(batch, features=staged.numpy())

        pipeline.pad_batch = pinned_pad_batch
    elif lever == "cuda_graph":
        from benchbase_torch_ds2 import backend

        eager_step = backend.TorchBackend.train_step

        def graphed_step(self, batch):
            if self.device.type == "cuda" and self.world_size == 1 and not getattr(self, "graphed", False):
                capture_graph(self, batch)
            return eager_step(self, batch)

        backend.TorchBackend.train_step = graphed_step
    elif lever == "frame_norm":
        from benchbase_torch_ds2.ds2 import model

        def frame_norm_forward(self, features):
            if self.quantizer is not None:
                return self._quantized_forward(features)
            x = self.conv(features.transpose(1, 2))
            x = self.dropout(self._activation(self.conv_norm(x))).transpose(1, 2)
            for lstm, norm in zip(self.lstms, self.lstm_norms):
                x = model.lstm_outputs(lstm, x)
                batch, frames, channels = x.shape
                x = self.dropout(norm(x.reshape(batch * frames, channels)).reshape(batch, frames, channels))
            return torch.log_softmax(self.output(x).float(), dim=-1)

        model.DeepSpeech2.forward = frame_norm_forward
    else:
        raise SystemExit(f"unknown lever {lever!r} (one of {', '.join(LEVERS)})")


def capture_graph(backend, batch) -> None:
    """The ``cuda_graph`` lever: the network's training forward and backward captured once, on the
    first batch (every batch has its shape: pad_to_frames), by torch.cuda.make_graphed_callables;
    CTC, the optimizer and everything else stay eager. The CUDA RNG state is restored after the
    capture's warm-up passes, so dropout draws the masks an eager run draws; the warm-up passes do
    update BatchNorm's running statistics three extra times on the first batch. Before training
    on it, the graph's forward is checked against the eager forward on the same batch and masks."""
    import contextlib
    import gc

    import torch

    started = time.perf_counter()
    network = backend.network
    features = backend._tensor(batch.features)
    rng = torch.cuda.get_rng_state(backend.device)
    autocast = (torch.autocast("cuda", dtype=backend.autocast_dtype, cache_enabled=False)
                if backend.autocast_dtype is not None else contextlib.nullcontext())
    with autocast:
        eager_forward = network.forward
        # Without autograd: a parameter's gradient accumulator made here, on the default stream,
        # and still alive at the capture makes the captured backward wait on the default stream,
        # which a capture forbids (seen with bf16: cudaErrorStreamCaptureImplicit).
        with torch.no_grad():
            torch.cuda.manual_seed(12345)
            eager = eager_forward(features).float().clone()
        gc.collect()  # no autograd graph of an earlier forward may outlive this point either
        torch.cuda.make_graphed_callables(network, (features,), num_warmup_iters=3)
        with torch.no_grad():
            torch.cuda.manual_seed(12345)
            graphed = network(features).float().clone()
    torch.cuda.set_rng_state(rng, backend.device)
    difference = ((graphed - eager).norm() / eager.norm()).item()
    backend.graphed = True
    print(json.dumps({"cuda_graph": {"capture_s": round(time.perf_counter() - started, 3),
                                     "forward_rel_diff_vs_eager": difference}}), file=sys.stderr, flush=True)


def child(args: argparse.Namespace) -> None:
    apply_lever(args.lever)
    from benchbase.cli import main

    sys.argv = ["benchbase", *args.benchbase]
    main()


# ---------------------------------------------------------------------------------------------- probe

def probe(args: argparse.Namespace) -> None:
    """The host-to-device copy of one paper-shaped batch's features, pageable against pinned."""
    import numpy as np
    import torch

    from benchbase.data.pipeline import BatchPipeline
    from benchbase.data.store import FeatureStore
    from benchbase.specs import WorkloadSpec
    from benchbase.specs.yaml_files import load_spec_file

    workload = load_spec_file(WorkloadSpec, args.dir / WORKLOAD_FILE)
    pipeline = BatchPipeline(FeatureStore(args.dir / STORE), ("train",), args.batch, model=workload.model,
                             readers=4, prefetch=8, pad_to_frames=workload.data.pad_to_frames, shuffle=False)
    batches = list(pipeline.epoch(1))

    def fresh(batch):
        """A newly allocated padded copy, as pad_batch hands the step one (np.zeros, then the rows)."""
        features = np.zeros_like(batch.features)
        for row, frames in enumerate(batch.feature_lengths):
            features[row, :frames] = batch.features[row, :frames]
        return features

    device = torch.device("cuda")
    torch.zeros(1, device=device)
    results: dict[str, list[float]] = {"pageable": [], "pin_memory_then_copy": [], "dma_from_pinned": []}
    staged = torch.empty(batches[0].features.shape, dtype=torch.float32, pin_memory=True)
    for repeat in range(args.repeats):
        batch = batches[repeat % len(batches)]
        first, second = fresh(batch), fresh(batch)
        torch.cuda.synchronize()
        start = time.perf_counter()
        torch.from_numpy(first).to(device, non_blocking=True)
        torch.cuda.synchronize()
        results["pageable"].append(time.perf_counter() - start)
        start = time.perf_counter()
        torch.from_numpy(second).pin_memory().to(device, non_blocking=True)
        torch.cuda.synchronize()
        results["pin_memory_then_copy"].append(time.perf_counter() - start)
        staged.numpy()[...] = batch.features
        start = time.perf_counter()
        staged.to(device, non_blocking=True)
        torch.cuda.synchronize()
        results["dma_from_pinned"].append(time.perf_counter() - start)
    size = batches[0].features.nbytes
    summary = {"bytes": size, "shape": list(batches[0].features.shape),
               **{name: {"median_ms": round(1e3 * statistics.median(values), 3),
                         "GB_per_s": round(size / statistics.median(values) / 1e9, 2)}
                  for name, values in results.items()}}
    print(json.dumps(summary))
    (args.out / "h2d-probe.json").write_text(json.dumps(summary, indent=1))


# ---------------------------------------------------------------------------------------------- run

def run(args: argparse.Namespace) -> None:
    started = time.monotonic()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    here = [sys.executable, str(Path(__file__).resolve())]
    if args.device == "cuda" and not args.no_probe:
        subprocess.run([*here, "probe", "--dir", str(args.dir), "--out", str(out)], timeout=120, check=False)
    seen: dict[str, int] = {}
    for spec in args.runs.split(","):
        precision, _, rest = spec.partition(":")
        lever, _, option = (rest or "none").partition(":")
        name = f"{precision}-{lever}" + ("-profile" if option == "profile" else "")
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name += f"-{seen[name]}"
        left = args.deadline - (time.monotonic() - started)
        if left < 30:
            print(f"skipping {name}: {left:.0f} s left before the deadline", flush=True)
            continue
        folder = out / name
        command = [*here, "child", "--lever", lever, "--", "run", "--workload", str(args.dir / WORKLOAD_FILE),
                   "--backend", "torch", "--hw", str(args.dir / PROFILE_FILE), "--data", str(args.dir / STORE),
                   "--device", args.device, "--precision", precision, "--no-final-eval", "--out", str(folder)]
        if args.epochs:
            command += ["--max-epochs", str(args.epochs)]
        if option == "profile":
            command += ["--profile-steps", "3"]
        if args.tiny:
            command += list(TINY)
        for override in args.set:
            command += ["--set", override]
        print(f"[{time.monotonic() - started:6.1f} s] {name}", flush=True)
        with open(out / f"{name}.log", "w") as log:
            try:
                code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=left).returncode
            except subprocess.TimeoutExpired:
                code = "timeout"
        print(f"[{time.monotonic() - started:6.1f} s] {name}: exit {code}", flush=True)
        if option == "profile" and folder.exists():
            summarize_trace(folder)
    table = summarize(out)
    print(table)
    if args.archive:
        with tarfile.open(args.archive, "w:gz") as archive:
            for path in sorted(out.rglob("*")):
                small = path.name in SMALL_FILES or path.suffix in (".log", ".md", ".json")
                if path.is_file() and small and not {"checkpoints", "profile", "decoded"} & set(path.parts):
                    archive.add(path, arcname=str(path.relative_to(out.parent)))


def summarize_trace(folder: Path) -> None:
    """Where the GPU's time goes in the profiled steps: kernel time by name, and how much of the
    traced span some kernel was running (the union of kernel intervals)."""
    traces = list((folder / "profile").glob("*.json"))
    if not traces:
        return
    events = json.loads(traces[0].read_text()).get("traceEvents", [])
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not kernels:
        return
    by_name: dict[str, list[float]] = {}
    for event in kernels:
        by_name.setdefault(f"{event['cat']}: {event['name'][:120]}", []).append(float(event["dur"]))
    intervals = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in kernels)
    busy, end = 0.0, intervals[0][0]
    for start, stop in intervals:
        if stop > end:
            busy += stop - max(start, end)
            end = stop
    span = intervals[-1][1] - intervals[0][0]
    total = sum(sum(values) for values in by_name.values())
    top = sorted(by_name.items(), key=lambda item: -sum(item[1]))[:15]
    summary = {"span_ms": round(span / 1e3, 2), "gpu_busy_ms": round(busy / 1e3, 2),
               "gpu_busy_share": round(busy / span, 4), "kernel_ms": round(total / 1e3, 2), "launches": len(kernels),
               "top": [{"name": name, "ms": round(sum(values) / 1e3, 2), "count": len(values),
                        "mean_us": round(statistics.mean(values), 2)} for name, values in top]}
    (folder / "profile-summary.json").write_text(json.dumps(summary, indent=1))
    for trace in traces:
        trace.unlink()  # tens of MB: the summary is what comes back


# ---------------------------------------------------------------------------------------------- summarize

def flops_per_step(config: dict) -> float:
    """Training FLOPs of one step on the padded batch: 3x the forward FLOPs of every padded utterance."""
    workload = config["workload"]
    model = validate_model(workload["model"])
    dimension = FeatureSpec.model_validate(workload["features"]).dimension
    utterance = total_forward_flops(forward_flops(model, dimension, workload["data"]["pad_to_frames"]))
    return TRAINING_FACTOR * utterance * config["hardware"]["pipeline"]["batch_per_device"]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def run_summary(folder: Path) -> dict | None:
    config_path = folder / "config.json"
    if not config_path.exists():
        return None
    config = json.loads(config_path.read_text())
    metrics = read_jsonl(folder / "metrics.jsonl")
    batches = [m for m in metrics if m.get("kind") == "batch"]
    evaluations = [m for m in metrics if m.get("kind") == "eval"]
    result = json.loads((folder / "result.json").read_text()) if (folder / "result.json").exists() else {}
    startup = {}
    for line in (folder / "mllog.log").read_text().splitlines() if (folder / "mllog.log").exists() else []:
        if '"benchbase_startup"' in line:
            startup = json.loads(line.partition(":::MLLOG ")[2])["value"]
    steady = batches[1:]  # the first step is start-up (benchbase_startup)
    if not steady:
        return {"name": folder.name, "status": result.get("status", "no batches")}
    steps = sorted(b["step_s"] for b in steady)
    later = [b for previous, b in zip(batches, batches[1:]) if b["epoch"] == previous["epoch"]]
    median = statistics.median(steps)
    flops = flops_per_step(config)
    precision = config["workload"]["model"].get("precision", "fp32")
    windows = [(b["t"] - b["step_s"], b["t"]) for b in steady]
    telemetry = read_jsonl(folder / "telemetry.jsonl")
    in_steps = [s["gpus"][0]["util"] for s in telemetry if s.get("gpus") and s["gpus"][0].get("util") is not None
                and any(start <= s["t"] <= stop for start, stop in windows)]
    summary = {
        "name": folder.name, "precision": precision, "status": result.get("status"),
        "batch": config["hardware"]["pipeline"]["batch_per_device"], "steps": len(batches),
        "median_step_s": round(median, 4), "p10_step_s": round(steps[len(steps) // 10], 4),
        "p90_step_s": round(steps[min(len(steps) - 1, (9 * len(steps)) // 10)], 4),
        "utt_per_s": round(config["hardware"]["pipeline"]["batch_per_device"] / median, 1),
        "tflops": round(flops / median / 1e12, 2), "flops_per_step": flops,
        "mfu_matching_peak": round(flops / median / PEAKS.get(precision, FP32_PEAK), 4),
        "mfu_vs_fp32_peak": round(flops / median / FP32_PEAK, 4),
        "data_wait_share": round(sum(b["wait_s"] for b in steady) / sum(b["step_s"] for b in steady), 5),
        "data_wait_max_s": round(max(b["wait_s"] for b in steady), 4),
        # each epoch's first batch waits for its readers unless an evaluation ran in between
        "data_wait_share_within_epochs": round(sum(b["wait_s"] for b in later) / sum(b["step_s"] for b in later), 5)
        if later else None,
        "startup": startup,
        "eval_s": [round(e["eval_s"], 2) for e in evaluations],
        "init_s": result.get("init_seconds"), "run_s": result.get("run_seconds"),
        "gpu_util_run_mean": (result.get("telemetry") or {}).get("gpu_percent_mean"),
        "gpu_util_in_steps_mean": round(statistics.mean(in_steps), 1) if in_steps else None,
        "gpu_util_samples_in_steps": len(in_steps),
        "peak_gpu_mem_mb": (result.get("telemetry") or {}).get("peak_gpu_mem_mb"),
        "losses": [round(b["loss"], 5) for b in batches],
        "devices": result.get("devices"),
    }
    return summary


def summarize(out: Path) -> str:
    runs = [s for s in (run_summary(folder) for folder in sorted(out.iterdir()) if folder.is_dir()) if s]
    for entry in runs:
        log = out / f"{entry['name']}.log"
        for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
            if line.startswith('{"cuda_graph"'):
                entry["cuda_graph"] = json.loads(line)["cuda_graph"]
    for entry in runs:
        if "median_step_s" not in entry:
            continue
        # The baseline: the mean of the medians of every run of the precision without a lever.
        plain = [r for r in runs if r.get("precision") == entry["precision"] and "median_step_s" in r
                 and r["name"].split("-")[1:2] == ["none"] and "profile" not in r["name"]]
        if plain:
            entry["step_vs_baseline"] = round(entry["median_step_s"] / statistics.mean(
                r["median_step_s"] for r in plain), 4)
            first = plain[0]
            if entry is not first:
                # Training from scratch at AdaDelta's learning rate 1.0 is chaotic: two runs of the same
                # seed part after a few steps from the GPU's nondeterministic reductions alone, so the
                # losses are compared over the first steps only (the same batches, the same masks).
                pairs = list(zip(first["losses"][:LOSS_STEPS_COMPARED], entry["losses"][:LOSS_STEPS_COMPARED]))
                entry["loss_max_rel_diff_vs_baseline"] = max(abs(a - b) / abs(a) for a, b in pairs)
    (out / "summary.json").write_text(json.dumps(runs, indent=1))
    header = ("| run | median step ms (p10-p90) | vs baseline | utt/s | TFLOP/s | MFU (matching peak) | vs FP32 peak "
              "| data wait % of step (within epochs) | build s | first batch wait s | first step s | eval s "
              "| GPU util % in steps (whole run) | peak GPU MB | loss max rel. diff vs baseline |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    header = header.replace("loss max rel. diff vs baseline", f"loss max rel. diff vs baseline, first "
                            f"{LOSS_STEPS_COMPARED} steps")
    lines[0] = header
    for r in runs:
        if "median_step_s" not in r:
            lines.append(f"| {r['name']} | {r.get('status')} |")
            continue
        s = r["startup"]
        diff = r.get("loss_max_rel_diff_vs_baseline")
        lines.append(
            f"| {r['name']} | {1e3 * r['median_step_s']:.1f} ({1e3 * r['p10_step_s']:.1f}-{1e3 * r['p90_step_s']:.1f}) "
            f"| {r['step_vs_baseline'] if 'step_vs_baseline' in r else '-'} | {r['utt_per_s']} | {r['tflops']} "
            f"| {100 * r['mfu_matching_peak']:.1f}% | {100 * r['mfu_vs_fp32_peak']:.1f}% "
            f"| {100 * r['data_wait_share']:.2f} ({100 * (r['data_wait_share_within_epochs'] or 0):.2f}) "
            f"| {s.get('build_s')} | {s.get('first_batch_wait_s')} "
            f"| {s.get('first_step_s')} | {', '.join(map(str, r['eval_s']))} | {r['gpu_util_in_steps_mean']} "
            f"({r['gpu_util_run_mean']}) | {r['peak_gpu_mem_mb']} | {'-' if diff is None else f'{diff:.2e}'} |")
    probe_file = out / "h2d-probe.json"
    if probe_file.exists():
        lines.append("")
        lines.append("host-to-device copy of one batch's features: " + probe_file.read_text().replace("\n", " "))
    table = "\n".join(lines)
    (out / "summary.md").write_text(table + "\n")
    return table


# ---------------------------------------------------------------------------------------------- main

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=textwrap.dedent(__doc__.partition("\n\n")[2]))
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("prepare", help="make the store, workload, profile and dist-info entries")
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--corpus", type=Path,
                   help="where the synthetic corpus goes (default: a folder in the temporary directory)")
    p.add_argument("--utterances", type=int, default=900, help="corpus size (900: 684 training utterances, "
                   "4 batches of 150 an epoch; the store is 42 MB)")
    p.add_argument("--epochs", type=int, default=6, help="epochs per run (4 steps and an evaluation each)")
    p.add_argument("--snapshot", action="store_true", help="copy HEAD's benchbase and torch backend into DIR/src")
    p.set_defaults(function=prepare)
    r = commands.add_parser("run", help="one `benchbase run` per precision:lever, then the table")
    r.add_argument("--dir", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    r.add_argument("--runs", default="bf16:none,fp32:none",
                   help="comma-separated PRECISION:LEVER[:profile] (levers: " + ", ".join(LEVERS) + ")")
    r.add_argument("--epochs", type=int, help="override the workload's epochs")
    r.add_argument("--deadline", type=float, default=3600, help="seconds: start no run after this")
    r.add_argument("--tiny", action="store_true", help="a small model and batch (a CPU smoke test)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="passed to every `benchbase run` (e.g. workload.model.dropout=0 to compare numerics)")
    r.add_argument("--no-probe", action="store_true", help="skip the host-to-device copy probe")
    r.add_argument("--archive", type=Path, help="tar.gz of the runs' small files")
    r.set_defaults(function=run)
    s = commands.add_parser("summarize", help="the table from the run folders")
    s.add_argument("out", type=Path)
    s.set_defaults(function=lambda args: print(summarize(args.out)))
    c = commands.add_parser("child", help=argparse.SUPPRESS)
    c.add_argument("--lever", default="none", help="a lever, or several joined by +")
    c.add_argument("benchbase", nargs=argparse.REMAINDER)
    c.set_defaults(function=child)
    q = commands.add_parser("probe", help=argparse.SUPPRESS)
    q.add_argument("--dir", type=Path, required=True)
    q.add_argument("--out", type=Path, required=True)
    q.add_argument("--batch", type=int, default=150)
    q.add_argument("--repeats", type=int, default=10)
    q.set_defaults(function=probe)
    args = parser.parse_args()
    if getattr(args, "benchbase", None) and args.benchbase[0] == "--":
        args.benchbase = args.benchbase[1:]
    args.function(args)


if __name__ == "__main__":
    main()

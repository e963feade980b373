"""What a bare GPU machine needs to run benchbase's GPU tier and its MFU table, and the runs themselves.

A bare GPU machine (a cloud instance, a cluster node) often has a CUDA torch and JAX but none of
benchbase's other dependencies, no eSpeak NG and no network. `prepare` makes, here, one folder that
carries everything else:

- ``whl/``: the wheels of what such a machine lacks (pydantic, jiwer, librosa, mlperf-logging, ...),
  for its Python (``--python-version``), at the versions installed here;
- ``stores/``: one synthetic corpus (``--utterances``) prepared twice, with ds2's features
  (``features``: it serves ds2-mini and the full ds2) and with the Conformer's (``conformer-features``:
  conformer-mini and the full conformer); the GPU tier reads them through ``BENCHBASE_TEST_STORES``;
  and a long corpus (``--long-utterances``, ``long_corpus``) prepared for the full rnnt with MLPerf's
  1023 pieces (``rnnt-features``: timing only);
- ``workloads/``: the full ds2, conformer and rnnt for timing on those corpora
  (``write_timing_workload``), and ``gpu.yaml``, a one-GPU profile;
- ``cache/``: the conformance kit's prepared speech (``BENCHBASE_CACHE``), which `backend-test` reads;
- ``site/``: dist-info entries, so that the torch and JAX backends' entry points are found where
  nothing is pip-installed; ``src/``: HEAD's code (``git archive``), so that edits in progress here
  cannot change what runs there; ``env.sh``: the environment to source there.

    python benchmarks/gpu_bundle.py prepare --dir .gpu            # about 56 MB at 400 + 40 utterances
    # there (the folder carried):  source .gpu/env.sh
    make -C .gpu/src test-gpu GPU_PYTHON=python3                  # the GPU tier
    python3 .gpu/src/benchmarks/gpu_bundle.py run --dir .gpu --out OUT \\
        --runs torch:ds2:bf16:150,torch:ds2:bf16:150:eager,jax:ds2:bf16:150,torch:conformer:bf16:32
    python3 benchmarks/gpu_bundle.py summarize OUT                 # the table again

A run is BACKEND:WORKLOAD:PRECISION:BATCH[:OPTION]: `benchbase run` of the timing workload on one GPU
at that per-device batch, every utterance padded to 1670 frames, no evaluation (the targets are
unreachable on this corpus; each run stops at its epoch limit); ``eager`` turns the profile's CUDA
graphs off; ``compile``, ``compile_ro``, ``compile_max`` compile the torch backend's training
forward with ``torch.compile`` in its default, reduce-overhead or max-autotune-no-cudagraphs mode
(``COMPILE_MODES``), the backend's graphs off; ``unrollN`` unrolls JAX's LSTM scans N frames a
loop iteration (``UNROLL``); ``profile`` profiles a few steps of the run (benchmarks/gpu_profile.py:
the device's busy share and its time by kind of kernel, into the run folder); ``pageable`` takes the
torch backend's page-locked host arrays away (``Backend.host_array``), so that the pipeline pads
into NumPy's memory and each step stages its copy, as before the hook; ``noautotune`` runs with
XLA's GPU autotuning off (``--xla_gpu_autotune_level=0``), to see whether it is what JAX's first
step waits for; ``nchw`` runs the torch Conformer's subsampling in PyTorch's default layout instead
of channels-last. BATCH ``fit`` is the largest batch that fits in the GPU's memory, as the peaks of
the same backend, workload and precision at two batches earlier in the list predict it
(``fitted_batch``), tried smaller if it runs out of memory. A batch of more than half the corpus's
training utterances reads them several times an epoch (``timing_workload``). The table: the median
step after the first, utterances/s, model FLOP utilization against the GPU's dense peak for the
precision (the family's own FLOP count, ``benchbase.families.<family>.cost``), the data wait's share
of the step, the first step (compilation, capture), and the peak GPU memory NVML saw.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.metadata
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # benchbase from this checkout, when run as a script
sys.path.insert(1, str(REPO / "benchmarks"))  # gpu_profile beside it, under PYTHONSAFEPATH too

import gpu_profile  # noqa: E402

from benchbase.data.store import FeatureStore  # noqa: E402
from benchbase.data.workload_data import default_cache  # noqa: E402
from benchbase.run_folder import read_json_lines  # noqa: E402

WHEELS = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "jiwer", "rapidfuzz",
          "mlperf-logging", "librosa", "soundfile", "cffi", "pycparser")
"""What `benchbase run`, `check`, `backend-test` and the GPU tier import that the GPU image lacks (it
has torch, JAX, numpy, scipy, click, rich, pluggy, matplotlib, pytest...). librosa's own needs load
lazily: features are computed here. The results database's SQLAlchemy is left out (5 MB)."""
STORES = {"features": "ds2", "conformer-features": "conformer", "rnnt-features": "rnnt"}
SUBSETS = "train,dev-clean,dev-other,test-clean,test-other"  # the mini workloads' subsets
PIECES_STORES = {"rnnt-features"}
"""Stores of the long corpus (``long_corpus``), labelled with their workload's own pieces. A
transducer's joint runs over every (frame, label) cell of its lattice and outputs all 1024 symbols
at each, so its step is MLPerf's only with MLPerf's vocabulary and labels of LibriSpeech's length;
ds2's and the Conformer's output layers run once a frame, and those stores keep short utterances
and characters (they also serve the GPU tier's mini workloads)."""
LONG_WORDS = 36
"""Words an utterance of the long corpus speaks: at the training voices' 130 to 190 words a minute,
9.4 to 16.4 s as prepared (median 11.4; LibriSpeech's mean is 12.3 s), within rnnt's 16.7 s."""
LONG_TEXT = ("README.md", "docs/*.md")
"""What the long corpus reads aloud: benchbase's own documentation at HEAD, about 53,000 words,
3,000 of them distinct. The synthetic grammar's 307 words make at most about 327 pieces, these make
1023; a few dozen utterances of them do not (496 from 48), so the pieces are trained on all of the
text and given to `data prepare --vocabulary`."""
PAD_FRAMES = 1670  # ds2's padding (16.7 s), for both families: each step has a fixed shape
PEAKS = {"fp32": 67e12, "tf32": 495e12, "bf16": 989e12, "fp16": 989e12}
"""H100 and H200 SXM dense peaks (NVIDIA's datasheets; the same GH100 chip and clocks): FP32 on the
CUDA cores, TF32 and BF16/FP16 on the tensor cores."""
CODE = ("benchbase", "plugins/torch_ds2", "plugins/jax_ds2", "hardware_profiles", "tests", "benchmarks",
        "conftest.py", "pyproject.toml", "Makefile")
ENTRY_POINTS = {"benchbase": "", "benchbase_torch_ds2": "torch = benchbase_torch_ds2.plugin",
                "benchbase_jax_ds2": "jax = benchbase_jax_ds2.plugin"}

PROFILE = {"name": "gpu", "description": "One NVIDIA GPU, 16 host cores (benchmarks/gpu_bundle.py).",
           "devices": {"kind": "gpu", "count": 1, "model": "NVIDIA GPU"},
           "cpu": {"model": "the GPU machine's host CPU", "cores": 16, "threads": 16, "ram_gb": 128},
           "pipeline": {"global_batch": 32, "batch_per_device": 32, "readers": 16, "buffer": 32}}


# ---------------------------------------------------------------------------------------------- prepare

def prepare(args: argparse.Namespace) -> None:
    directory = args.dir.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    download_wheels(directory / "whl", args.python_version)
    corpus = Path(tempfile.gettempdir()) / f"benchbase-gpu-corpus-{args.utterances}"
    benchbase = [sys.executable, "-m", "benchbase"]
    if not (corpus / "train").exists():
        subprocess.run([*benchbase, "data", "synth", "--out", str(corpus), "--utterances", str(args.utterances)],
                       check=True)
    for name, workload in STORES.items():
        store = directory / "stores" / name
        pieces = name in PIECES_STORES
        utterances = args.long_utterances if pieces else args.utterances
        timing = write_timing_workload(directory / "workloads", workload, utterances, pieces)
        if not (store / "store.json").exists():
            source, given = long_corpus(args.long_utterances, timing) if pieces else (corpus, [])
            subprocess.run([*benchbase, "data", "prepare", "--librispeech", str(source), "--workload", str(timing),
                            "--subsets", SUBSETS, "--out", str(store), *given], check=True)
        if pieces:
            print(described_training(store, timing))
    (directory / "workloads" / "gpu.yaml").write_text(yaml.safe_dump(PROFILE, sort_keys=False))
    from benchbase.kit.data import ensure_kit_store

    store = ensure_kit_store(default_cache())  # the kit's speech: prepared here, carried (about 2 MB)
    shutil.copytree(store.parent, directory / "cache" / store.parent.name, dirs_exist_ok=True)
    write_dist_info(directory / "site")
    snapshot(directory / "src")
    (directory / "env.sh").write_text(ENV)
    size = sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())
    print(f"prepared {directory}: {size / 1e6:.1f} MB")


ENV = """\
# Source on the GPU machine: installs the carried wheels into /tmp/site and points Python at them,
# at the carried code and at the entry points (benchmarks/gpu_bundle.py).
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \\
    "$BUNDLE"/whl/*.whl || return 1
export PYTHONPATH="/tmp/site:$BUNDLE/src:$BUNDLE/src/plugins/torch_ds2:$BUNDLE/src/plugins/jax_ds2:$BUNDLE/site"
export BENCHBASE_TEST_STORES="$BUNDLE/stores" BENCHBASE_CACHE="$BUNDLE/cache" PYTHONUNBUFFERED=1
"""


def download_wheels(folder: Path, python_version: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    platforms = [f"--platform={tag}" for tag in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
                                                  "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                                                  "manylinux1_x86_64", "manylinux_2_5_x86_64")]
    pinned = [f"{name}=={importlib.metadata.version(name)}" for name in WHEELS]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    f"--python-version={python_version}", "--implementation=cp", *platforms, "-d", str(folder),
                    *pinned], check=True)


def long_corpus(utterances: int, timing: Path) -> tuple[Path, list[str]]:
    """The long corpus: ``utterances`` of LONG_WORDS words of LONG_TEXT, spoken by `data synth`
    (cached by the text's digest), and the `data prepare` arguments that give its store the timing
    workload's pieces, trained here on all of the text."""
    from benchbase.data.vocabulary import train_pieces
    from benchbase.specs.workload import WorkloadSpec

    lines = long_lines(LONG_WORDS)
    text = "".join(line + "\n" for line in lines)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    corpus = Path(tempfile.gettempdir()) / f"benchbase-gpu-long-corpus-{utterances}-{digest}"
    text_file, model_file = corpus.with_suffix(".txt"), corpus.with_suffix(".model")
    text_file.write_text(text)
    if not (corpus / "train").exists():
        subprocess.run([sys.executable, "-m", "benchbase", "data", "synth", "--out", str(corpus), "--utterances",
                        str(utterances), "--text", str(text_file)], check=True)
    tokens = WorkloadSpec.model_validate(yaml.safe_load(timing.read_text())).data.tokens
    model_file.write_bytes(train_pieces(lines, tokens))
    return corpus, ["--vocabulary", str(model_file)]


def long_lines(words_per_line: int) -> list[str]:
    """LONG_TEXT at HEAD as lines of ``words_per_line`` words (letters and apostrophes, lower case:
    what the alphabet spells), in the files' order."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "--", *LONG_TEXT], check=True,
                            capture_output=True, text=True).stdout.split()
    words = [word.lower() for path in listed
             for word in re.findall(r"[A-Za-z]+(?:'[A-Za-z]+)?", subprocess.run(
                 ["git", "-C", str(REPO), "show", f"HEAD:{path}"], check=True, capture_output=True,
                 text=True).stdout)]
    return [" ".join(words[start:start + words_per_line])
            for start in range(0, len(words) - words_per_line + 1, words_per_line)]


def write_timing_workload(folder: Path, family: str, utterances: int, pieces: bool = False) -> Path:
    """The registered ``family`` workload for timing on the synthetic corpus: its model, features and
    optimizer; the synthetic subsets padded to PAD_FRAMES; no evaluation but the end's, targets out
    of reach. Characters, unless ``pieces`` (a store of PIECES_STORES): the short corpus is too small
    to train AlgoPerf's 1023 pieces, and the output layer is under 1% of the Conformer's FLOPs."""
    from benchbase.plugin_host import get_plugin_manager
    from benchbase.plugin_host.registry import collect_registry

    spec = collect_registry(get_plugin_manager(load_entrypoints=False)).workload(family)
    workload = spec.model_dump(mode="json", exclude_none=True)
    workload["name"] = f"{family}-gpu-timing"
    workload["description"] = f"The full {family} on benchbase's synthetic corpus, for timing a GPU only."
    workload["reference"] = f"the {family} workload"
    workload["data"] = {**workload["data"], "dataset": "synthetic", "train": ["train"], "dev": ["dev-clean"],
                        "test": ["test-clean"], "pad_to_frames": PAD_FRAMES, "synthetic_utterances": utterances}
    workload["data"].pop("length_buckets", None)
    if not pieces:
        workload["data"].pop("tokens", None)
        if workload["model"].get("symbols") not in (None, 30):
            workload["model"]["symbols"] = 30
    workload["evaluation"] = {**workload["evaluation"], "every_epochs": 100, "independent_utterances": 0}
    workload["tta"] = {"subset": "dev-clean", "window": 1, "targets": [{"metric": "wer", "value": 0.001}]}
    workload["max_epochs"], workload["max_minutes"] = 8, 5
    corpus = (f"the long synthetic corpus ({utterances} utterances of {LONG_WORDS} words of benchbase's "
              "documentation), its pieces trained on the whole text" if pieces
              else f"the synthetic corpus ({utterances} utterances), characters")
    workload["deviations"] = [{"field": "data", "reference": f"the {family} workload's LibriSpeech",
                               "benchbase": f"{corpus}, padded to {PAD_FRAMES} frames",
                               "why": "Timing the GPU path on a machine without LibriSpeech."}]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{family}-gpu-timing.yaml"
    path.write_text(yaml.safe_dump(workload, sort_keys=False))
    return path


def write_dist_info(site: Path) -> None:
    for name, entry_point in ENTRY_POINTS.items():
        info = site / f"{name}-0.0.0.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: 0.0.0\n")
        if entry_point:
            (info / "entry_points.txt").write_text(f"[benchbase]\n{entry_point}\n")


def snapshot(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD", *CODE], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    subprocess.run(["rm", "-rf", str(folder / "tests" / "data")], check=True)  # recorded runs: not the tier's
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], check=True, capture_output=True,
                            text=True).stdout.strip()
    (folder / "COMMIT").write_text(commit + "\n")


# ---------------------------------------------------------------------------------------------- run

def run(args: argparse.Namespace) -> None:
    for spec in args.runs.split(","):  # every run's spelling before the first starts
        parts = spec.split(":")
        if len(parts) < 4 or parts[1] not in STORES.values() or not (parts[3] == "fit" or parts[3].isdigit()):
            raise SystemExit(f"gpu_bundle.py run: --runs {spec!r}: expected BACKEND:WORKLOAD:PRECISION:BATCH[:OPTION], "
                             f"WORKLOAD one of {', '.join(STORES.values())}, BATCH a number or fit")
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    for spec in args.runs.split(","):
        backend, workload, precision, batch, *options = spec.split(":")
        attempts = 1
        if batch == "fit":
            fitted, how = fitted_batch(args.out, backend, workload, precision, args.device)
            print(f"[{time.monotonic() - started:6.1f} s] {spec}: {how}", flush=True)
            if fitted is None:
                continue
            batch, attempts = str(fitted), FIT_ATTEMPTS
            options = [*options, "fit"]
        for _ in range(attempts):
            name = f"{backend}-{workload}-{precision}-b{batch}" + "".join(f"-{option}" for option in options)
            left = args.deadline - (time.monotonic() - started)
            if left < 20:
                print(f"skipping {name}: {left:.0f} s left before the deadline", flush=True)
                break
            code = launch(args, name, backend, workload, precision, int(batch), options, left)
            print(f"[{time.monotonic() - started:6.1f} s] {name}: exit {code}", flush=True)
            if "fit" not in options or not ran_out_of_memory(args.out / f"{name}.log"):
                break
            batch = str(multiple_below(FIT_STEP_DOWN * int(batch)))  # the model's guess was too high
    print(summarize(args.out))
    print(gpu_profile.summarize(args.out))


def launch(args: argparse.Namespace, name: str, backend: str, workload: str, precision: str, batch: int,
           options: list[str], left: float) -> int | str:
    """One `benchbase run` of the timing workload at ``batch`` per GPU; its exit code, or "timeout"."""
    store = next(store for store, family in STORES.items() if family == workload)
    compiled = [option for option in options if option in COMPILE_MODES]
    levers = [option for option in options
              if option in (*COMPILE_MODES, "pageable", "profile", "nchw") or UNROLL.fullmatch(option)]
    starter = ([sys.executable, str(Path(__file__).resolve()), "child", "--lever", levers[0], "--"]
               if levers else [sys.executable, "-m", "benchbase"])
    command = [*starter, "run", "--workload", str(timing_workload(args, workload, store, batch)),
               "--backend", backend,
               "--hw", str(args.dir / "workloads" / "gpu.yaml"), "--data", str(args.dir / "stores" / store),
               "--device", args.device, "--precision", precision, "--no-final-eval", "--out", str(args.out / name),
               "--max-epochs", str(args.epochs), "--set", f"hardware.pipeline.global_batch={batch}",
               "--set", f"hardware.pipeline.batch_per_device={batch}"]
    if "eager" in options or compiled:  # torch.compile's own graphs, not the backend's
        command += ["--set", "hardware.devices.cuda_graphs=false"]
    for override in args.set:
        command += ["--set", override]
    environment = dict(os.environ)
    if "noautotune" in options:  # XLA's GPU autotuning off: is it what JAX's first step waits for?
        environment["XLA_FLAGS"] = (environment.get("XLA_FLAGS", "") + " --xla_gpu_autotune_level=0").strip()
    print(f"[{args.deadline - left:6.1f} s] {name}", flush=True)
    with open(args.out / f"{name}.log", "w") as log:
        try:
            return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=left,
                                  env=environment).returncode
        except subprocess.TimeoutExpired:
            return "timeout"


def timing_workload(args: argparse.Namespace, workload: str, store: str, batch: int) -> Path:
    """The timing workload for a per-GPU ``batch``: as prepared, or, for a batch of more than half the
    training utterances, a copy that reads the training subset as many times an epoch as give every
    epoch at least two steps (the harness drops an epoch's last partial batch, so a batch beyond the
    subset would train nothing; every utterance is padded to the same frames, so a step costs the
    same whichever utterances it holds)."""
    prepared = args.dir / "workloads" / f"{workload}-gpu-timing.yaml"
    training = FeatureStore(args.dir / "stores" / store).utterance_count(["train"])
    repeats = -(-2 * batch // training)
    if repeats <= 1:
        return prepared
    spec = yaml.safe_load(prepared.read_text())
    spec["data"]["train"] = ["train"] * repeats
    spec["deviations"].append({"field": "data.train", "reference": "each training utterance once an epoch",
                               "benchbase": f"the training subset {repeats} times an epoch",
                               "why": f"A per-GPU batch of {batch} on a subset of {training} utterances."})
    path = args.out / "workloads" / f"{workload}-gpu-timing-x{repeats}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


FIT_HEADROOM = 0.06
"""The share of the GPU's memory a fitted batch leaves free: the line through two runs' peaks does not
see the allocator's fragmentation, which grows with the tensors."""
FIT_ATTEMPTS = 3
FIT_STEP_DOWN = 0.9
"""A fitted batch that ran out of memory is tried again this much smaller, FIT_ATTEMPTS in all."""


def fitted_batch(out: Path, backend: str, workload: str, precision: str, device: str) -> tuple[int | None, str]:
    """The largest per-GPU batch (a multiple of 8) that the earlier runs in ``out`` predict to fit in
    the GPU's memory, and how it was found; None, and why, where it cannot be predicted.

    A step's memory is the weights, the optimizer's state and the framework's context, which do not
    grow with the batch, plus the activations, which grow in proportion to it (every utterance is
    padded to the same frames): so the peak GPU memory NVML saw in runs of the same backend,
    workload and precision at two or more batches, without a lever, fixes a line, and the batch is
    where that line meets the GPU's memory less FIT_HEADROOM. The run at that batch is the check."""
    if device != "cuda":
        return None, "no GPU: nothing to fit"
    from benchbase.telemetry.hardware_detect import detected_gpus

    gpus, note = detected_gpus()
    if not gpus:
        return None, f"the GPU's memory is unknown ({note})"
    capacity_mb = gpus[0].memory_gb * 1e9 / 2**20  # NVML's used memory comes in MiB
    plain = re.compile(rf"{re.escape(backend)}-{re.escape(workload)}-{re.escape(precision)}-b(\d+)")
    points = sorted((int(match.group(1)), entry["peak_gpu_mem_mb"]) for folder in sorted(out.iterdir())
                    if (match := plain.fullmatch(folder.name)) and (folder / "config.json").exists()
                    and (entry := run_summary(folder)).get("steps", 0) >= 2 and entry.get("peak_gpu_mem_mb"))
    return batch_for_memory(points, capacity_mb)


def batch_for_memory(points: list[tuple[int, float]], capacity_mb: float) -> tuple[int | None, str]:
    """The batch (a multiple of 8) where the least-squares line through (batch, peak MiB) ``points``
    reaches ``capacity_mb`` less FIT_HEADROOM, and the line's numbers; None where they fix no rising line."""
    batches = {batch for batch, _ in points}
    if len(batches) < 2:
        return None, f"needs runs at two batches without a lever first, found {sorted(batches) or 'none'}"
    mean_batch = statistics.fmean(batch for batch, _ in points)
    mean_peak = statistics.fmean(peak for _, peak in points)
    slope = (sum((batch - mean_batch) * (peak - mean_peak) for batch, peak in points)
             / sum((batch - mean_batch) ** 2 for batch, _ in points))
    if slope <= 0:
        return None, f"the peaks {points} do not grow with the batch"
    fixed = mean_peak - slope * mean_batch
    reach = ((1 - FIT_HEADROOM) * capacity_mb - fixed) / slope
    how = (f"{fixed:.0f} MiB + {slope:.1f} MiB an utterance (from {len(points)} runs at {sorted(batches)}) "
           f"reaches {100 * (1 - FIT_HEADROOM):.0f}% of {capacity_mb:.0f} MiB at batch {reach:.0f}")
    return (multiple_below(reach) if reach >= 8 else None), how


def multiple_below(batch: float, step: int = 8) -> int:
    return max(step, int(batch) // step * step)


def ran_out_of_memory(log: Path) -> bool:
    """Whether a run's output says its framework ran out of device memory (torch's OutOfMemoryError,
    the CUDA error, XLA's RESOURCE_EXHAUSTED)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return "out of memory" in text.lower() or "RESOURCE_EXHAUSTED" in text


COMPILE_MODES = {"compile": "default", "compile_ro": "reduce-overhead", "compile_max": "max-autotune-no-cudagraphs"}
"""The ``torch.compile`` lever: the torch backend's training forward compiled by TorchInductor in one
of its modes (reduce-overhead replays CUDA graphs of its own); a lever measured here, not the
backend's default."""


UNROLL = re.compile(r"unroll(\d+)")
"""The JAX lever ``unrollN``: the LSTM's scans over frames (forward and backward) and the transducer
loss's over its anti-diagonals unrolled N steps per loop iteration (``lax.scan(unroll=N)``): fewer,
larger loop bodies for XLA, fewer trips of a GPU's while loop to the host; the same arithmetic."""


def child(args: argparse.Namespace) -> None:
    """`benchbase ARGS` in this process with one lever applied: the torch backend's training forward
    compiled (``COMPILE_MODES``), JAX's LSTM scans unrolled (``UNROLL``), or the torch backend without
    its page-locked host arrays (``pageable``), or a few of its steps profiled (``profile``), or the
    torch Conformer's subsampling in PyTorch's default layout instead of channels-last (``nchw``)."""
    if args.lever == "profile":
        gpu_profile.patch_train_step(Path(args.benchbase[args.benchbase.index("--out") + 1]))
    elif args.lever == "nchw":
        from benchbase_torch_ds2.conformer import model as conformer_model

        conformer_model.Subsampling.CHANNELS_LAST = False
    elif args.lever == "pageable":
        from benchbase_torch_ds2 import backend as torch_backend

        torch_backend.TorchBackend.host_array = lambda self, shape, dtype: None
    elif unrolled := UNROLL.fullmatch(args.lever):
        import functools
        import types

        from benchbase_jax_ds2 import recurrence
        from benchbase_jax_ds2.rnnt import loss as transducer_loss
        from jax import lax

        steps = int(unrolled.group(1))
        recurrence.SCAN_UNROLL = steps
        transducer_loss.lax = types.SimpleNamespace(**{**vars(lax), "scan": functools.partial(lax.scan, unroll=steps)})
    else:
        import torch
        from benchbase_torch_ds2 import backend as torch_backend

        built = torch_backend.TorchBackend.build

        def compiled_build(self, context):
            built(self, context)
            if self.model is self.network:  # one device, no graphs of the backend's own
                self.model = torch.compile(self.network, mode=COMPILE_MODES[args.lever])

        torch_backend.TorchBackend.build = compiled_build
    from benchbase.cli import main as benchbase_main

    benchbase_main(args.benchbase)


def training_flops(config: dict) -> float | None:
    """A step's training FLOPs on the padded batch: the family's forward FLOPs x its training factor;
    None for a workload that pads each batch to its own longest utterance (the FLOPs vary by step).

    A family whose cost counts labels (the transducer's lattice) is counted at the mean label count
    of the store's training utterances: each utterance's own labels, not the batch's padding to its
    longest, which is waste the step does and the model does not need (None where the store is not
    at hand, as on a machine the run folders were copied to)."""
    import inspect

    from benchbase.specs.model import validate_model
    from benchbase.specs.workload import FeatureSpec

    workload = config["workload"]
    if workload["data"].get("pad_to_frames") is None:
        return None
    model = validate_model(workload["model"])
    cost = importlib.import_module(f"benchbase.families.{model.family}.cost")
    dimension = FeatureSpec.model_validate(workload["features"]).dimension
    shape = [model, dimension, workload["data"]["pad_to_frames"]]
    if "labels" in inspect.signature(cost.forward_flops).parameters:
        if (labels := mean_training_labels(Path(config["data"]))) is None:
            return None
        shape.append(labels)
    forward = cost.total_forward_flops(cost.forward_flops(*shape))
    return cost.TRAINING_FACTOR * forward * config["hardware"]["pipeline"]["batch_per_device"]


def described_training(store: Path, timing: Path) -> str:
    """The training utterances' count, seconds (min, median, max, at the timing workload's hop) and
    mean labels, as docs/gpu.md quotes them for the long corpus."""
    spectra = yaml.safe_load(timing.read_text())["features"]
    features = FeatureStore(store)
    seconds = np.concatenate([features.index(shard).frames() for shard in features.shards(["train"])]
                             ) * spectra["hop"] / spectra["sample_rate"]
    return (f"{store.name}: {len(seconds)} training utterances of {seconds.min():.1f} to {seconds.max():.1f} s "
            f"(median {np.median(seconds):.1f}), {mean_training_labels(store):.1f} labels on average")


def mean_training_labels(store: Path) -> float | None:
    """The mean label count of ``store``'s training utterances; None where it is not a store here."""
    if not FeatureStore.exists(store):
        return None
    features = FeatureStore(store)
    shards = features.shards(["train"])
    return sum(int(features.index(shard).label_offsets[-1]) for shard in shards) / features.utterance_count(["train"])


def run_summary(folder: Path) -> dict:
    config = json.loads((folder / "config.json").read_text())
    result = json.loads((folder / "result.json").read_text()) if (folder / "result.json").exists() else {}
    batches = [m for m in read_json_lines(folder / "metrics.jsonl") if m.get("kind") == "batch"]
    steady = batches[1:]  # the first step holds the compilation or the capture
    entry = {"name": folder.name, "status": result.get("status"), "steps": len(batches),
             "devices": result.get("devices"),
             "peak_gpu_mem_mb": (result.get("telemetry") or {}).get("peak_gpu_mem_mb")}
    if not steady:
        return entry
    precision = config["workload"]["model"].get("precision", "fp32")
    steps = sorted(b["step_s"] for b in steady)
    later = [b for previous, b in zip(batches, batches[1:]) if b["epoch"] == previous["epoch"]]
    median = statistics.median(steps)
    flops = training_flops(config)
    graphs = [b["backend"] for b in batches if "backend" in b]
    entry.update({
        "precision": precision, "batch": config["hardware"]["pipeline"]["batch_per_device"],
        "median_step_ms": round(1e3 * median, 2), "p10_step_ms": round(1e3 * steps[len(steps) // 10], 2),
        "p90_step_ms": round(1e3 * steps[min(len(steps) - 1, 9 * len(steps) // 10)], 2),
        "utt_per_s": round(config["hardware"]["pipeline"]["batch_per_device"] / median, 1),
        "tflops": None if flops is None else round(flops / median / 1e12, 1),
        "mfu": None if flops is None or precision not in PEAKS else round(flops / median / PEAKS[precision], 4),
        "data_wait_share": round(sum(b["wait_s"] for b in steady) / sum(b["step_s"] for b in steady), 4),
        # Each epoch's first batch waits for the readers to start: on this small corpus (a few steps an
        # epoch) that is most of the wait, on LibriSpeech's thousands of steps an epoch it is not.
        "data_wait_share_within_epochs": round(sum(b["wait_s"] for b in later) / sum(b["step_s"] for b in later), 4)
        if later else None,
        "first_step_s": round(batches[0]["step_s"], 2), "cuda_graphs": graphs[-1] if graphs else None,
        "losses": [round(b["loss"], 4) for b in batches[:4]],
    })
    return entry


def summarize(out: Path) -> str:
    runs = [run_summary(folder) for folder in sorted(out.iterdir()) if (folder / "config.json").exists()]
    (out / "summary.json").write_text(json.dumps(runs, indent=1))
    lines = ["| run | median step ms (p10-p90) | utt/s | TFLOP/s | MFU (matching dense peak) "
             "| data wait % (within epochs) | first step s | peak GPU MB | CUDA graphs |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in runs:
        if "median_step_ms" not in r:
            lines.append(f"| {r['name']} | {r.get('status')} ({r['steps']} steps) |")
            continue
        graphs = r["cuda_graphs"]
        share = r["data_wait_share_within_epochs"]
        within = "-" if share is None else f"{100 * share:.2f}"
        graph_text = (f"{graphs['cuda_graphs']:.0f} ({graphs['cuda_graph_memory_bytes'] / 1e6:.0f} MB, "
                      f"{graphs['cuda_graph_failures']:.0f} failed)") if graphs else "-"
        mfu = "-" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
        lines.append(f"| {r['name']} | {r['median_step_ms']} ({r['p10_step_ms']}-{r['p90_step_ms']}) "
                     f"| {r['utt_per_s']} "
                     f"| {'-' if r['tflops'] is None else r['tflops']} | {mfu} "
                     f"| {100 * r['data_wait_share']:.2f} ({within}) "
                     f"| {r['first_step_s']} | {r['peak_gpu_mem_mb']} | {graph_text} |")
    table = "\n".join(lines)
    (out / "summary.md").write_text(table + "\n")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.partition("\n\n")[2])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("prepare", help="the wheels, stores, workloads, entry points and code")
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--utterances", type=int, default=400, help="the synthetic corpus's size (304 to train on)")
    p.add_argument("--long-utterances", type=int, default=40, help="the long corpus's size (PIECES_STORES)")
    p.add_argument("--python-version", default="3.12", help="the GPU machine's Python (its wheels' tags)")
    p.set_defaults(function=prepare)
    r = commands.add_parser("run", help="one `benchbase run` per BACKEND:WORKLOAD:PRECISION:BATCH[:eager]")
    r.add_argument("--dir", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--runs", required=True)
    r.add_argument("--epochs", type=int, default=6)
    r.add_argument("--deadline", type=float, default=3600, help="seconds: start no run after this")
    r.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke test of this script")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to every run")
    r.set_defaults(function=run)
    c = commands.add_parser("child", help=argparse.SUPPRESS)
    c.add_argument("--lever", required=True,
                   help="compile, compile_ro, compile_max, unrollN, pageable, profile or nchw")
    c.add_argument("benchbase", nargs=argparse.REMAINDER)
    c.set_defaults(function=child)
    s = commands.add_parser("summarize", help="the table from the run folders")
    s.add_argument("out", type=Path)
    s.set_defaults(function=lambda args: print(summarize(args.out)))
    args = parser.parse_args()
    if getattr(args, "benchbase", None) and args.benchbase[0] == "--":
        args.benchbase = args.benchbase[1:]
    args.function(args)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()

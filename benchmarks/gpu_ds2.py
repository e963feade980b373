"""Time the full ds2 model (the paper's: 25.6M parameters) training on one GPU through the backend contract.

Each backend runs in its own process (one CUDA context, its own allocator, NVML readings of
its own), and inside it each per-device batch size in ascending order: build with a
BuildContext and a one-device DevicePlan of the kind the backend's Capabilities name ("cuda"),
untimed warm-up steps (the first one, where JAX compiles, is reported on its own), then timed
``train_step()`` calls while a thread samples NVML every 50 ms, then ``predict()`` on one batch.

The batches are random but shaped like the paper's: features (batch, 1670, 93), every
utterance padded to 1670 frames, true lengths uniform in [800, 1670], standard-normal
features (the harness's features are standardized) and zeros past each length, labels of
one character per 6 input frames (never the blank) and the output lengths of
``ModelSpec.output_frames``, built into ``benchbase.backend.Batch`` as ``pad_batch`` does.

FLOPs are counted analytically from the ModelSpec per conv output frame (forward), by
``benchbase.families.ds2.cost``: the convolution, each LSTM layer with its elementwise work, the
output layer; a training step is 3x the forward pass (backward = 2x forward). MFU divides them
by the median step time and the GPU's peak dense
FP32 rate without tensor cores (H100 SXM: 67 TFLOP/s), once counting the padded frames (what
the GPU computes) and once only the true frames; the ratio to the TF32 tensor-core peak
(H100 SXM: 495 TFLOP/s dense) is given for context.

``--precision`` runs each backend in one or more of the spec's GPU precisions (``ModelSpec.precision``:
fp32, tf32, bf16, fp16; one worker process per backend, precisions in the order given), and
"MFU (matching peak)" divides by the peak of the arithmetic that precision puts on the tensor
cores: FP32 (no tensor cores) for fp32, dense TF32 for tf32, dense BF16/FP16 for bf16 and fp16
(H100 SXM: 67, 495 and 989 TFLOP/s). The FLOPs are the same in every precision.

    python benchmarks/gpu_ds2.py                                   # cuda, torch and jax, the profiles' batches
    python benchmarks/gpu_ds2.py --backends torch --batch 60,150 --steps 30
    python benchmarks/gpu_ds2.py --batch 60,150 --precision fp32,tf32,bf16,fp16
    python benchmarks/gpu_ds2.py --device cpu --steps 2 --batch 2 --frames 200   # a smoke test without a GPU
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parent.parent
# The plugins' packages, importable from a plain checkout (no `pip install -e` needed).
for _plugin in ("torch_ds2", "jax_ds2", "tf_ds2"):
    if str(REPO / "plugins" / _plugin) not in sys.path:
        sys.path.append(str(REPO / "plugins" / _plugin))
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchbase.backend import Backend, BackendReference, Batch, BuildContext, DevicePlan  # noqa: E402
from benchbase.families.ds2.cost import TRAINING_FACTOR, forward_flops_per_frame, total_forward_flops  # noqa: E402
from benchbase.specs import ModelSpec, OptimizerSpec  # noqa: E402
from benchbase.specs.model import validate_model  # noqa: E402
from benchbase.specs.optimizer import validate_optimizer  # noqa: E402
from benchbase.telemetry.nvml import Gpu, open_nvml, read_gpu  # noqa: E402

WORKLOAD = "ds2"
PROFILES = ("sys1", "sys2", "sys10")
LARGER_BATCH = 300
PAPER_FRAMES = 1670
PAPER_MIN_FRAMES = 800
BACKENDS = {
    "torch": "benchbase_torch_ds2.backend:TorchBackend",
    "jax": "benchbase_jax_ds2.backend:JaxBackend",
    "tf": "benchbase_tf_ds2.backend:TensorFlowBackend",
}
# Peak dense throughput in FLOP/s: FP32 on the CUDA cores (no tensor cores), TF32 and BF16/FP16 on
# the tensor cores, from NVIDIA's H100 and H200 datasheets (tensor-core rates there are quoted with
# 2:4 sparsity; dense is half). H100 SXM FP32: 132 SMs x 128 FP32 lanes x 2 FLOP x 1.98 GHz = 66.9 TFLOP/s.
PEAKS = (
    ("H100 PCIe", 51.2e12, 378e12, 756e12,
     "NVIDIA H100 datasheet (PCIe): FP32 51 TFLOPS, TF32 756 and BF16/FP16 1513 TFLOPS with sparsity"),
    ("H100 NVL", 60e12, 418e12, 835e12,
     "NVIDIA H100 datasheet (NVL): FP32 60 TFLOPS, TF32 835 and BF16/FP16 1671 TFLOPS with sparsity"),
    ("H100", 67e12, 495e12, 989e12,
     "NVIDIA H100 datasheet (SXM5): FP32 67 TFLOPS, TF32 989 and BF16/FP16 1979 TFLOPS with sparsity"),
    ("H200", 67e12, 495e12, 989e12,
     "NVIDIA H200 datasheet (SXM): FP32 67 TFLOPS, TF32 989 and BF16/FP16 1979 TFLOPS with sparsity"),
)
GPU_PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
NVML_PERIOD_S = 0.05


# --------------------------------------------------------------------------- workload and work


def load_workload() -> tuple[ModelSpec, OptimizerSpec, int, int | None, str]:
    """The ds2 model, optimizer, features per frame and pad_to_frames; from the spec, or its YAML's fields."""
    try:
        from benchbase.plugin_host.builtins.workloads import builtin_workload

        workload = builtin_workload(WORKLOAD)
        return (workload.model, workload.optimizer, workload.features.dimension,
                getattr(workload.data, "pad_to_frames", None), "builtin_workload('ds2')")
    except Exception as error:  # noqa: BLE001 - the workload spec is being edited elsewhere: read the fields we need
        text = yaml.safe_load((REPO / "benchbase" / "workloads" / f"{WORKLOAD}.yaml").read_text())
        features = text.get("features", {})
        note = f"ds2.yaml's model/optimizer fields (builtin_workload failed: {type(error).__name__}: {error})"
        return (validate_model(text["model"]), validate_optimizer(text.get("optimizer", {})),
                int(features.get("mel_bands", 80)) + int(features.get("mfcc", 13)),
                text.get("data", {}).get("pad_to_frames"), note)


def profile_batches() -> list[int]:
    """The paper's per-device batch sizes (hardware_profiles/sys*.yaml), plus one larger."""
    sizes = set()
    for name in PROFILES:
        profile = yaml.safe_load((REPO / "hardware_profiles" / f"{name}.yaml").read_text())
        sizes.add(int(profile["pipeline"]["batch_per_device"]))
    return sorted(sizes | {LARGER_BATCH})


def gpu_peaks(name: str) -> tuple[float | None, float | None, str]:
    for key, fp32, tf32, _, source in PEAKS:
        if key.lower() in name.lower():
            return fp32, tf32, source
    return None, None, f"no peak known for {name!r} (pass --peak-fp32-tflops)"


def matching_peak(name: str, precision: str) -> float | None:
    """The dense peak of the arithmetic ``precision`` runs its matmuls in (FP32 cores for fp32)."""
    for key, fp32, tf32, half, _ in PEAKS:
        if key.lower() in name.lower():
            return {"fp32": fp32, "tf32": tf32, "bf16": half, "fp16": half}[precision]
    return None


def random_batches(model: ModelSpec, rows: int, frames: int, min_frames: int, feature_dimension: int,
                   frames_per_label: float, count: int, seed: int) -> list[Batch]:
    """Random batches shaped like the paper's: padded to ``frames``, true lengths in [min_frames, frames]."""
    rng = np.random.default_rng([seed, rows])
    batches = []
    for number in range(count):
        lengths = rng.integers(max(min_frames, model.conv_width), frames + 1, size=rows).astype(np.int32)
        features = rng.standard_normal((rows, frames, feature_dimension), dtype=np.float32)
        features *= (np.arange(frames)[None, :] < lengths[:, None])[..., None]
        output_lengths = model.output_frames(lengths)
        # A label per `frames_per_label` input frames, leaving CTC room for repeated neighbours.
        label_lengths = np.clip(np.round(lengths / frames_per_label), 1, np.maximum(output_lengths // 2, 1))
        label_lengths = label_lengths.astype(np.int32)
        labels = np.full((rows, int(label_lengths.max())), model.ctc_blank_index, np.int32)
        for row, length in enumerate(label_lengths):
            symbols = rng.integers(0, model.symbols - 1, size=length)
            labels[row, :length] = symbols + (symbols >= model.ctc_blank_index)  # never the blank
        batches.append(Batch(
            features=np.ascontiguousarray(features), feature_lengths=lengths, output_lengths=output_lengths,
            labels=labels, label_lengths=label_lengths,
            utterance_ids=tuple(f"random-{rows}-{number}-{row}" for row in range(rows)),
            transcripts=("",) * rows,
        ))
    return batches


# --------------------------------------------------------------------------- NVML


class NvmlSampler:
    """Samples the GPU's utilization, memory in use, SM clock and power every 50 ms in a thread.

    Read through benchbase's own NVML reader (``benchbase.telemetry.nvml``), as a run's telemetry
    reads it: the GPU is the first one CUDA_VISIBLE_DEVICES selects (CUDA's device 0), and a
    reading the board refuses is None rather than the end of the measurement.
    """

    def __init__(self, nvml, gpu: Gpu) -> None:
        self.nvml, self.gpu = nvml, gpu
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def open(cls) -> tuple[NvmlSampler | None, str]:
        """(a sampler of the GPU this process trains on, NVML's status line); None where NVML reads no GPU."""
        nvml, gpus, status = open_nvml(os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("CUDA_DEVICE_ORDER"))
        return (cls(nvml, gpus[0]) if gpus else None), status

    def describe(self) -> dict:
        nvml, handle = self.nvml, self.gpu.handle
        return {
            "name": self.gpu.name,
            "driver": _text(nvml.nvmlSystemGetDriverVersion()),
            "memory_total_mib": nvml.nvmlDeviceGetMemoryInfo(handle).total / 2**20,
            "max_sm_clock_mhz": nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM),
            "power_limit_w": nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000,
        }

    def start(self) -> None:
        self.samples = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> dict:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if not self.samples:
            return {"samples": 0}

        def read(key: str) -> list[float]:
            return [sample[key] for sample in self.samples if sample[key] is not None]

        utilization = read("util")
        return {
            "samples": len(self.samples),
            "utilization_mean_pct": _mean(utilization),
            "utilization_median_pct": float(np.median(utilization)) if utilization else None,
            "memory_bandwidth_util_mean_pct": _mean(read("mem_util")),
            "memory_used_peak_mib": max(read("mem_used_mb"), default=None),  # read_gpu's MB are MiB (2**20 bytes)
            "sm_clock_mean_mhz": _mean(read("sm_clock_mhz")),
            "power_mean_w": _mean(read("power_w")),
        }

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(read_gpu(self.nvml, self.gpu.handle) | {"sm_clock_mhz": self._sm_clock()})
            self._stop.wait(NVML_PERIOD_S)

    def _sm_clock(self) -> float | None:
        """The one reading here that a run's telemetry does not take (read_gpu has no clock)."""
        try:
            return self.nvml.nvmlDeviceGetClockInfo(self.gpu.handle, self.nvml.NVML_CLOCK_SM)
        except self.nvml.NVMLError:
            return None


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _safely(read):
    """A reading that must not cost the measurement around it: its error, recorded, instead of a raise."""
    try:
        return read()
    except Exception as error:  # noqa: BLE001 - a failed reading is recorded, the measurement goes on
        return {"error": f"{type(error).__name__}: {error}"}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# --------------------------------------------------------------------------- one backend (worker process)


class Framework:
    """What differs between frameworks around the contract: versions, syncing, allocator peaks."""

    def __init__(self, name: str, device: str) -> None:
        self.name, self.device = name, device

    def versions(self) -> dict:
        if self.name == "torch":
            import torch

            return {"torch": torch.__version__, "cuda": torch.version.cuda,
                    "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}
        if self.name == "jax":
            import jax
            import jaxlib

            versions = {"jax": jax.__version__, "jaxlib": jaxlib.__version__}
            try:
                from importlib.metadata import distributions

                versions |= {d.metadata["Name"]: d.version for d in distributions()
                             if (d.metadata["Name"] or "").startswith(("jax-cuda", "jax_cuda", "optax"))}
            except Exception:  # noqa: BLE001 - versions are a courtesy; a broken metadata entry costs nothing
                pass
            return versions
        if self.name == "tf":
            import tensorflow as tf

            return {"tensorflow": tf.__version__}
        return {}

    def precision(self) -> dict:
        """The precision settings in force after build() (fp32: true IEEE float32, no TF32)."""
        if self.name == "torch":
            import torch

            settings = {"cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
                        "float32_matmul_precision": torch.get_float32_matmul_precision()}
            # PyTorch 2.9+ also keeps per-operator settings; the legacy flags above map onto them.
            for label, owner in (("fp32_precision", torch.backends), ("cuda.matmul", torch.backends.cuda.matmul),
                                 ("cudnn", torch.backends.cudnn),
                                 ("cudnn.conv", getattr(torch.backends.cudnn, "conv", None)),
                                 ("cudnn.rnn", getattr(torch.backends.cudnn, "rnn", None))):
                value = _safely(lambda owner=owner: getattr(owner, "fp32_precision", None))
                if value is not None:
                    settings[f"{label}.fp32_precision" if label != "fp32_precision" else label] = value
            return settings
        if self.name == "jax":
            import jax

            return {"lax precision": "per ModelSpec.precision (benchbase_jax_ds2.arithmetic.arithmetic): HIGHEST for "
                                     "fp32, DEFAULT (TF32) for tf32, bf16/fp16 operands with float32 accumulation",
                    "jax_default_matmul_precision": str(jax.config.jax_default_matmul_precision)}
        if self.name == "tf":
            import tensorflow as tf

            return {"tensor_float_32_execution": tf.config.experimental.tensor_float_32_execution_enabled()}
        return {}

    def fp32_probe(self) -> dict:
        """Relative error against float64 of a (512 x 800) @ (800 x 3200) product (an LSTM layer's input
        projection) and, for PyTorch, of a cuDNN LSTM: about 1e-6 in IEEE fp32, 1e-4 to 1e-3 with TF32.
        Run with the settings the backend's build() left, and once with TF32 allowed, to show the probe
        tells them apart."""
        rng = np.random.default_rng(0)
        a = rng.standard_normal((512, 800)).astype(np.float32)
        b = rng.standard_normal((800, 3200)).astype(np.float32)
        reference = a.astype(np.float64) @ b.astype(np.float64)

        def error(value) -> float:
            return float(np.abs(np.asarray(value, np.float64) - reference).max() / np.abs(reference).max())

        if self.name == "torch":
            import torch

            x, y = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
            probe = {"matmul_backend_settings": error((x @ y).cpu())}
            torch.manual_seed(0)
            lstm = torch.nn.LSTM(800, 800, batch_first=True).double()
            inputs = torch.from_numpy(rng.standard_normal((8, 64, 800)))
            with torch.no_grad():
                expected = lstm(inputs)[0].numpy()
                lstm = lstm.float().cuda()
                got = lstm(inputs.float().cuda())[0].cpu().double().numpy()
                probe["lstm_backend_settings"] = float(np.abs(got - expected).max() / np.abs(expected).max())
                saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
                torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
                try:
                    probe["matmul_tf32_allowed"] = error((x @ y).cpu())
                    got = lstm(inputs.float().cuda())[0].cpu().double().numpy()
                    probe["lstm_tf32_allowed"] = float(np.abs(got - expected).max() / np.abs(expected).max())
                finally:
                    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
            return probe
        if self.name == "jax":
            import jax
            import jax.numpy as jnp

            x, y = (jax.device_put(v, jax.devices("cuda")[0]) for v in (a, b))
            return {"matmul_highest (the plugin's)": error(jnp.matmul(x, y, precision=jax.lax.Precision.HIGHEST)),
                    "matmul_default": error(jnp.matmul(x, y))}
        return {}

    def synchronize(self) -> None:
        if self.name == "torch" and self.device == "cuda":
            import torch

            torch.cuda.synchronize()

    def reset_peak(self) -> None:
        if self.name == "torch" and self.device == "cuda":
            import torch

            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def peak_bytes(self) -> dict:
        """The framework allocator's own peak (JAX's is over the process: batch sizes run ascending)."""
        if self.device != "cuda":
            return {}
        if self.name == "torch":
            import torch

            return {"allocated_peak_bytes": torch.cuda.max_memory_allocated(),
                    "reserved_peak_bytes": torch.cuda.max_memory_reserved()}
        if self.name == "jax":
            import jax

            stats = jax.devices("cuda")[0].memory_stats() or {}
            return {"allocated_peak_bytes": stats.get("peak_bytes_in_use"),
                    "bytes_limit": stats.get("bytes_limit")}
        return {}


def run_worker(args: argparse.Namespace) -> None:
    result_path = Path(args.result)
    report: dict = {"backend": args.worker, "results": [], "error": None}

    def save() -> None:
        result_path.write_text(json.dumps(report, indent=1, default=str))

    try:
        backend_class = BackendReference(args.worker, BACKENDS[args.worker]).load()
    except Exception as error:  # noqa: BLE001 - any import failure is the report's finding
        report["error"] = f"import failed: {type(error).__name__}: {error}"
        report["traceback"] = traceback.format_exc()[-3000:]
        save()
        return
    kind = "cuda" if args.device in ("cuda", "gpu") else "cpu"
    if kind not in backend_class.capabilities.devices:
        report["error"] = f"{args.worker}'s Capabilities name devices {sorted(backend_class.capabilities.devices)}"
        save()
        return
    framework = Framework(args.worker, kind)
    report["versions"] = _safely(framework.versions)
    print(f"[{args.worker}] {report['versions']}", flush=True)
    model, optimizer, feature_dimension, _, _ = load_workload()
    sampler, report["nvml_status"] = NvmlSampler.open() if kind == "cuda" else (None, "not a GPU run")
    flops_frame = total_forward_flops(forward_flops_per_frame(model, feature_dimension))
    peak_fp32, peak_tf32 = args.peak_fp32_tflops * 1e12 if args.peak_fp32_tflops else None, None
    if sampler is not None:
        report["gpu"] = sampler.describe()
        known_fp32, peak_tf32, _ = gpu_peaks(report["gpu"]["name"])
        peak_fp32 = peak_fp32 or known_fp32
    started = time.perf_counter()
    runs = [(precision, rows) for precision in args.precision.split(",") for rows in args.batches]
    previous: tuple[int, float] | None = None
    for precision, rows in runs:
        elapsed = time.perf_counter() - started
        if precision not in backend_class.capabilities.precisions:
            report["results"].append({"batch": rows, "precision_mode": precision,
                                      "skipped": f"{args.worker} does not declare precision {precision}"})
            continue
        if previous is not None and elapsed + previous[1] * rows / previous[0] > args.budget:
            report["results"].append({"batch": rows, "precision_mode": precision,
                                      "skipped": f"time budget of {args.budget:.0f} s per backend"})
            print(f"[{args.worker}] {precision} batch {rows}: skipped (budget)", flush=True)
            save()
            continue
        size_started = time.perf_counter()
        try:
            peak_matching = matching_peak(report["gpu"]["name"], precision) if sampler is not None else None
            entry = measure(backend_class, framework, sampler, args, model.model_copy(update={"precision": precision}),
                            optimizer, feature_dimension, rows, kind, flops_frame, peak_fp32, peak_tf32,
                            peak_matching)
            report["results"].append(entry)
            report["device"] = entry.pop("device_description", None)
            # The framework's settings after build() in this precision (TF32 flags and the like).
            entry["framework_settings"] = entry.pop("precision", None)
            report.setdefault("precision", {})[precision] = entry["framework_settings"]
            if "fp32_probe" not in report and precision == "fp32" and kind == "cuda":
                report["fp32_probe"] = _safely(framework.fp32_probe)
            if rows == args.batches[0]:
                print(f"[{args.worker}] {report['device']}; {precision}: settings {entry['framework_settings']}; "
                      f"fp32 probe (max relative error vs float64) {report.get('fp32_probe')}", flush=True)
            print(f"[{args.worker}] {precision} batch {rows}: median step {entry['step_ms']['median']:.1f} ms, "
                  f"{entry['utterances_per_s']:.1f} utt/s, first step {entry['first_step_s']:.1f} s, "
                  f"MFU matching peak {_fmt(entry.get('mfu_matching_padded'), '.3f')}, "
                  f"NVML util {_fmt(entry['nvml'].get('utilization_mean_pct'), '.0f')}%, "
                  f"loss {entry['losses'][0]:.1f} -> {entry['losses'][-1]:.1f}", flush=True)
        except Exception as error:  # noqa: BLE001 - one failing configuration is recorded, the sweep goes on
            message = f"{type(error).__name__}: {str(error)[:1500]}"
            report["results"].append({"batch": rows, "precision_mode": precision, "error": message,
                                      "traceback": traceback.format_exc()[-4000:]})
            print(f"[{args.worker}] {precision} batch {rows}: FAILED {message}", flush=True)
            save()
            continue  # the next precision may still run (an out-of-memory repeats at larger batches only)
        previous = (rows, time.perf_counter() - size_started)
        save()
    save()


def measure(backend_class: type[Backend], framework: Framework, sampler: NvmlSampler | None,
            args: argparse.Namespace, model: ModelSpec, optimizer: OptimizerSpec, feature_dimension: int,
            rows: int, kind: str, flops_frame: int, peak_fp32: float | None, peak_tf32: float | None,
            peak_matching: float | None = None) -> dict:
    batches = random_batches(model, rows, args.frames, args.min_frames, feature_dimension, args.frames_per_label,
                             args.distinct, args.seed)
    plan = DevicePlan(kind=kind, count=1, batch_per_device=rows, threads=args.threads)
    context = BuildContext(model=model, optimizer=optimizer, feature_dimension=feature_dimension, plan=plan,
                           seed=args.seed, max_frames=args.frames,
                           max_label_length=max(int(b.label_lengths.max()) for b in batches))
    framework.reset_peak()
    backend = backend_class()
    try:
        clock = time.perf_counter()
        backend.build(context)
        build_s = time.perf_counter() - clock
        losses = []
        clock = time.perf_counter()
        losses.append(backend.train_step(batches[0]))
        framework.synchronize()
        first_step_s = time.perf_counter() - clock
        for step in range(1, args.warmup):
            losses.append(backend.train_step(batches[step % len(batches)]))
        framework.synchronize()
        times = []
        if sampler is not None:
            sampler.start()
        try:
            for step in range(args.steps):
                batch = batches[step % len(batches)]
                clock = time.perf_counter()
                losses.append(backend.train_step(batch))
                framework.synchronize()
                times.append(time.perf_counter() - clock)
        finally:
            nvml = sampler.stop() if sampler is not None else {}
        inputs = batches[0].inputs()
        clock = time.perf_counter()
        log_probs = backend.predict(inputs)  # JAX compiles its predict program here
        first_predict_s = time.perf_counter() - clock
        predict_times = []
        for _ in range(args.predict_repeats):
            clock = time.perf_counter()
            backend.predict(inputs)
            predict_times.append(time.perf_counter() - clock)
        peaks = _safely(framework.peak_bytes)
        device_description = _safely(backend.device_description)
        parameters = _safely(backend.parameter_count)
        precision = _safely(framework.precision)
    finally:
        backend.close()

    median = float(np.median(times))
    used = [batches[step % len(batches)] for step in range(args.steps)]
    padded_frames = rows * model.output_frames(args.frames)  # conv output frames the GPU computes per step
    true_frames = float(np.mean([int(b.output_lengths.sum()) for b in used]))
    true_input_frames = float(np.mean([int(b.feature_lengths.sum()) for b in used]))
    flops_padded = TRAINING_FACTOR * flops_frame * padded_frames
    flops_true = TRAINING_FACTOR * flops_frame * true_frames
    entry = {
        "batch": rows,
        "precision_mode": model.precision,
        "parameters": parameters,
        "build_s": build_s,
        "first_step_s": first_step_s,
        "warmup_steps": args.warmup,
        "steps": len(times),
        "step_ms": {"median": median * 1e3, "p10": float(np.percentile(times, 10)) * 1e3,
                    "p90": float(np.percentile(times, 90)) * 1e3, "mean": float(np.mean(times)) * 1e3,
                    "min": float(np.min(times)) * 1e3, "max": float(np.max(times)) * 1e3},
        "step_times_s": times,
        "utterances_per_s": rows / median,
        "true_input_frames_per_s": true_input_frames / median,
        "padded_input_frames_per_s": rows * args.frames / median,
        "audio_seconds_per_s": true_input_frames / median / 100,  # 10 ms frames
        "flops_per_step_padded": flops_padded,
        "flops_per_step_true": flops_true,
        "achieved_tflops_padded": flops_padded / median / 1e12,
        "mfu_fp32_padded": flops_padded / median / peak_fp32 if peak_fp32 else None,
        "mfu_fp32_true": flops_true / median / peak_fp32 if peak_fp32 else None,
        "ratio_tf32_peak_padded": flops_padded / median / peak_tf32 if peak_tf32 else None,
        "peak_matching_flops": peak_matching,
        "mfu_matching_padded": flops_padded / median / peak_matching if peak_matching else None,
        "mfu_matching_true": flops_true / median / peak_matching if peak_matching else None,
        "nvml": nvml,
        "framework_memory": peaks,
        "predict_first_s": first_predict_s,
        "predict_ms": {"median": float(np.median(predict_times)) * 1e3 if predict_times else None,
                       "repeats": len(predict_times)},
        "predict_utterances_per_s": rows / float(np.median(predict_times)) if predict_times else None,
        "predict_output_shape": list(log_probs.shape),
        "losses": [float(loss) for loss in losses],
        "losses_finite": bool(np.all(np.isfinite(losses))),
        "device_description": device_description,
        "precision": precision,
    }
    return entry


# --------------------------------------------------------------------------- orchestration


def main() -> None:
    args = _parser().parse_args()
    model, _, feature_dimension, pad_to_frames, workload_source = load_workload()
    args.frames = args.frames or pad_to_frames or PAPER_FRAMES
    args.min_frames = args.min_frames or max(model.conv_width, round(args.frames * PAPER_MIN_FRAMES / PAPER_FRAMES))
    args.batches = sorted({int(b) for b in args.batch.split(",")}) if args.batch else profile_batches()
    args.warmup = args.warmup if args.warmup is not None else (3 if args.device != "cpu" else 1)
    if args.worker:
        run_worker(args)
        return

    out = Path(args.out or Path(os.environ.get("OUT") or REPO / "runs") / "gpu_ds2.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    flops = forward_flops_per_frame(model, feature_dimension)
    summary: dict = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": [Path(sys.executable).name, *sys.argv],
        "host": platform.node(), "python": platform.python_version(),
        "workload": WORKLOAD, "workload_source": workload_source,
        "model": model.model_dump(), "feature_dimension": feature_dimension,
        "parameters_spec": model.parameter_count(feature_dimension),
        "frames": args.frames, "min_frames": args.min_frames, "frames_per_label": args.frames_per_label,
        "output_frames_padded": model.output_frames(args.frames),
        "forward_flops_per_output_frame": flops,
        "training_flops_per_output_frame": TRAINING_FACTOR * total_forward_flops(flops),
        "flop_counting": "analytic from the ModelSpec; training = 3x forward; 'padded' counts every conv output "
                         "frame of the padded batch (what the GPU computes), 'true' only the utterances' own",
        "nvidia_smi": _nvidia_smi() if args.device != "cpu" else None,
        "backends": [],
    }
    if args.device != "cpu" and summary["nvidia_smi"]:
        fp32, tf32, source = gpu_peaks(summary["nvidia_smi"].split(",")[0])
        summary["peak_fp32_flops"] = args.peak_fp32_tflops * 1e12 if args.peak_fp32_tflops else fp32
        summary["peak_tf32_dense_flops"], summary["peak_source"] = tf32, source
    print(f"{WORKLOAD}: {summary['parameters_spec'] / 1e6:.2f}M parameters, {feature_dimension} features, "
          f"{args.frames} padded frames ({summary['output_frames_padded']} after the conv), true lengths "
          f"[{args.min_frames}, {args.frames}], training {summary['training_flops_per_output_frame'] / 1e6:.1f} "
          f"MFLOP per output frame; batches {args.batches}; {args.warmup} warm-up + {args.steps} timed steps",
          flush=True)
    for name in args.backends.split(","):
        summary["backends"].append(_run_backend(name, args))
        out.write_text(json.dumps(summary, indent=1, default=str))
    table = markdown_table(summary)
    print(table)
    out.with_suffix(".md").write_text(table + "\n")
    print(f"results: {out}")


def _run_backend(name: str, args: argparse.Namespace) -> dict:
    """One backend in a process of its own; its finished batch sizes survive a crash or a kill."""
    with tempfile.TemporaryDirectory() as folder:
        result = Path(folder) / "worker-report.json"  # the worker's own report; no run folder is involved
        command = [sys.executable, str(Path(__file__).resolve()), *_worker_arguments(args), "--worker", name,
                   "--result", str(result)]
        env = dict(os.environ, PYTHONUNBUFFERED="1", XLA_PYTHON_CLIENT_PREALLOCATE="false",
                   TF_FORCE_GPU_ALLOW_GROWTH="true")
        started = time.perf_counter()
        print(f"[{name}] starting", flush=True)
        error = None
        try:
            completed = subprocess.run(command, env=env, timeout=args.budget + args.grace, stderr=subprocess.PIPE,
                                       text=True)
            if completed.returncode:
                error = f"worker exited {completed.returncode}: {completed.stderr[-3000:]}"
            stderr_tail = completed.stderr[-2000:]
        except subprocess.TimeoutExpired as expired:
            error = f"worker killed after {args.budget + args.grace:.0f} s"
            stderr_tail = _text(expired.stderr or b"")[-2000:]
        report = json.loads(result.read_text()) if result.exists() else {"backend": name, "results": []}
    report["wall_s"] = time.perf_counter() - started
    report["stderr_tail"] = stderr_tail
    if error and not report.get("error"):
        report["error"] = error
    if report.get("error"):
        print(f"[{name}] ERROR {report['error'][:3000]}", flush=True)
    return report


def _worker_arguments(args: argparse.Namespace) -> list[str]:
    values = ["--device", args.device, "--precision", args.precision, "--steps", str(args.steps),
              "--warmup", str(args.warmup),
              "--batch", ",".join(map(str, args.batches)), "--frames", str(args.frames),
              "--min-frames", str(args.min_frames), "--frames-per-label", str(args.frames_per_label),
              "--distinct", str(args.distinct), "--predict-repeats", str(args.predict_repeats),
              "--seed", str(args.seed), "--budget", str(args.budget)]
    if args.threads:
        values += ["--threads", str(args.threads)]
    if args.peak_fp32_tflops:
        values += ["--peak-fp32-tflops", str(args.peak_fp32_tflops)]
    return values


def _nvidia_smi() -> str | None:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,"
                               "power.limit", "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def markdown_table(summary: dict) -> str:
    lines = [
        "| backend | precision | batch | median step ms (p10-p90) | utt/s | true frames/s | GPU util % (mean) | "
        "peak GPU mem GiB (NVML / allocator) | TFLOP/s (padded) | MFU matching peak padded (true) | "
        "MFU fp32 padded | predict ms (utt/s) | first step s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for report in summary["backends"]:
        name = report["backend"]
        if not report.get("results"):
            lines.append(f"| {name} | | | failed: {(report.get('error') or 'no result').splitlines()[0][:200]} "
                         "| | | | | | | | | |")
            continue
        for entry in report["results"]:
            if "skipped" in entry or "error" in entry:
                why = entry.get("skipped") or entry["error"].splitlines()[0][:200]
                lines.append(f"| {name} | {entry.get('precision_mode', 'fp32')} | {entry['batch']} | {why} "
                             "| | | | | | | | | |")
                continue
            step, nvml, memory = entry["step_ms"], entry["nvml"], entry["framework_memory"]
            allocator = memory.get("allocated_peak_bytes")
            lines.append(
                f"| {name} | {entry.get('precision_mode', 'fp32')} | {entry['batch']} "
                f"| {step['median']:.1f} ({step['p10']:.1f}-{step['p90']:.1f}) "
                f"| {entry['utterances_per_s']:.1f} | {entry['true_input_frames_per_s'] / 1e3:.1f}k "
                f"| {_fmt(nvml.get('utilization_mean_pct'), '.0f')} "
                f"| {_fmt(_gib(nvml.get('memory_used_peak_mib'), 2**20), '.1f')} / {_fmt(_gib(allocator), '.1f')} "
                f"| {entry['achieved_tflops_padded']:.2f} "
                f"| {_fmt(entry.get('mfu_matching_padded'), '.1%')} ({_fmt(entry.get('mfu_matching_true'), '.1%')}) "
                f"| {_fmt(entry['mfu_fp32_padded'], '.1%')} "
                f"| {_fmt(entry['predict_ms']['median'], '.1f')} ({_fmt(entry['predict_utterances_per_s'], '.0f')}) "
                f"| {entry['first_step_s']:.1f} |")
    return "\n".join(lines)


def _precisions(text: str) -> str:
    chosen = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in GPU_PRECISIONS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown precision {unknown}: choose from {', '.join(GPU_PRECISIONS)}")
    return ",".join(chosen)


def _gib(value: float | None, unit: int = 1) -> float | None:
    return None if value is None else value * unit / 2**30


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=("cuda", "gpu", "cpu"))
    parser.add_argument("--backends", default="torch,jax", help="comma-separated: torch, jax, tf")
    parser.add_argument("--precision", default="fp32", type=_precisions,
                        help=f"comma-separated ModelSpec.precision values, from {', '.join(GPU_PRECISIONS)}")
    parser.add_argument("--batch", help="comma-separated per-device batch sizes (default: sys1/sys2/sys10's "
                        f"batch_per_device and {LARGER_BATCH})")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per batch size")
    parser.add_argument("--warmup", type=int, help="untimed steps first, compilation included (default 3; cpu 1)")
    parser.add_argument("--frames", type=int, help="padded frames per utterance (default: ds2's pad_to_frames "
                        f"or the paper's {PAPER_FRAMES})")
    parser.add_argument("--min-frames", type=int, help=f"shortest true length (default frames*{PAPER_MIN_FRAMES}/"
                        f"{PAPER_FRAMES})")
    parser.add_argument("--frames-per-label", type=float, default=6.0, help="input frames per label character")
    parser.add_argument("--distinct", type=int, default=3, help="distinct random batches cycled per batch size")
    parser.add_argument("--predict-repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, help="DevicePlan.threads (default: the framework's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=float, default=240.0,
                        help="seconds per backend: batch sizes that would overrun it are skipped")
    parser.add_argument("--grace", type=float, default=60.0, help="seconds past --budget before a worker is killed")
    parser.add_argument("--peak-fp32-tflops", type=float, help="override the GPU's peak FP32 TFLOP/s")
    parser.add_argument("--out", help="JSON results (default: $OUT/gpu_ds2.json, else runs/gpu_ds2.json); "
                        "the Markdown table goes beside it")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    return parser


if __name__ == "__main__":
    main()

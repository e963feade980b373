"""The GPU tier: the conformance kit and whole runs on a CUDA GPU (`make test-gpu`).

Each test here is marked ``gpu`` and skips where the backend sees no GPU (CI has none); the one
that runs everywhere checks that asking for a GPU there is one clear line. On a GPU machine
without benchbase's data dependencies, benchmarks/gpu_bundle.py prepares the stores these tests
read (``BENCHBASE_TEST_STORES``); docs/gpu.md says how.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
from cli_helpers import run_benchbase

from benchbase.plugin_host.builtins.workloads import builtin_workload
from benchbase.specs.model import model_families

MINI_WORKLOADS = sorted(path.stem for path in (Path(__file__).resolve().parents[1] / "benchbase" / "workloads").glob(
    "*-mini.yaml"))
"""The workloads the tier trains end to end: every family's small one, found, not listed."""


def gpus_of(backend: str) -> int:
    """How many CUDA devices ``backend`` sees here (0 where it is not installed)."""
    module, name = {"torch": ("benchbase_torch_ds2.backend", "TorchBackend"),
                    "jax": ("benchbase_jax_ds2.backend", "JaxBackend")}[backend]
    if importlib.util.find_spec(module.partition(".")[0]) is None:
        return 0
    return getattr(importlib.import_module(module), name).visible_devices("cuda") or 0


def needs_gpu(backend: str):
    return pytest.mark.skipif(not gpus_of(backend), reason=f"backend {backend!r} sees no CUDA GPU here")


def test_make_test_gpu_collects_every_file_that_holds_a_gpu_test():
    # The tier names its files (collecting only them needs none of the test-only packages); a
    # file left off that list would have its GPU tests skipped by every GPU session, silently.
    root = Path(__file__).resolve().parents[1]
    listed = re.search(r"^GPU_TESTS := \$\(wildcard ((?:.*\\\n)*.*)\)$", (root / "Makefile").read_text(),
                       re.MULTILINE)
    assert listed, "Makefile: no GPU_TESTS := $(wildcard ...)"
    named = set(listed.group(1).replace("\\", " ").split())
    holding = {str(path.relative_to(root)) for pattern in ("tests/test_*.py", "plugins/*/tests/test_*.py")
               for path in root.glob(pattern) if re.search(r"\bmark\.gpu\b", path.read_text())}
    assert holding and named == holding, (sorted(holding - named), sorted(named - holding))


def test_the_kit_on_a_gpu_that_is_not_there_is_one_line():
    if gpus_of("torch"):
        pytest.skip("this machine has a GPU")
    result = run_benchbase("backend-test", "torch", "--family", "ds2", "--device", "cuda", timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "benchbase: error: --device cuda: backend 'torch' sees no cuda device here"]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("family", model_families())
@pytest.mark.parametrize(("backend", "precision"), [pytest.param("torch", "fp32", marks=needs_gpu("torch")),
                                                    pytest.param("jax", "fp32", marks=needs_gpu("jax")),
                                                    pytest.param("torch", "int8-emulated", marks=needs_gpu("torch"))])
def test_the_kit_passes_on_the_gpu(backend, family, precision):
    """Every rule, with the CPU's bounds: the spec's fp32 is IEEE float32 on the GPU too (TF32 off),
    and int8-emulated's rules hold its fake quantization to the quantized reference. Every family
    the backend declares in the precision."""
    from benchbase.kit.conformance import resolve_backend

    if precision not in resolve_backend(backend).capabilities.precisions_of(family):
        pytest.skip(f"backend {backend!r} does not declare {precision} for {family}")
    result = run_benchbase("backend-test", backend, "--family", family, "--precision", precision, "--device", "cuda",
                           "--json", timeout=900)
    assert result.stdout.startswith("{"), result.stderr[-3000:]
    report = json.loads(result.stdout)
    failed = {rule["rule"]: rule["message"] for rule in report["rules"] if not rule["passed"]}
    assert result.returncode == 0 and not failed, failed
    assert report["device"] == "cuda"


def store_of(request: pytest.FixtureRequest, workload: str) -> Path:
    """The small corpus prepared with ``workload``'s features: a store of conftest.py's."""
    features = builtin_workload(workload).features
    for fixture, prepared_for in (("small_store", "ds2-mini"), ("conformer_store", "conformer-mini")):
        if builtin_workload(prepared_for).features == features:
            return request.getfixturevalue(fixture)
    pytest.fail(f"{workload}: no store of conftest.py has its features; add one there", pytrace=False)


def _gpu_run(backend: str, workload: str, store: Path, out: Path, *extra: str):
    return run_benchbase("run", "--workload", workload, "--backend", backend, "--hw", "cpu", "--device", "cuda",
                         "--data", str(store), "--out", str(out), *extra, timeout=900)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("workload", MINI_WORKLOADS)
@pytest.mark.parametrize("backend", [pytest.param("torch", marks=needs_gpu("torch")),
                                     pytest.param("jax", marks=needs_gpu("jax"))])
def test_a_mini_workload_trains_on_the_gpu(request, tmp_path, backend, workload):
    """`benchbase run --device cuda` end to end: the run ends as planned (a loose target reached,
    or its epoch limit: an RNN-T that has not learned to emit scores CER 100 for a while) with its
    dev loss falling, the log passes `check`, and NVML's telemetry sampled the GPU it trained on."""
    folder = tmp_path / "run"
    result = _gpu_run(backend, workload, store_of(request, workload), folder, "--target", "paper_cer=99",
                      "--max-epochs", "6")
    summary = json.loads((folder / "result.json").read_text()) if (folder / "result.json").exists() else {}
    assert (result.returncode, summary.get("status")) in ((0, "success"), (3, "aborted")), result.stderr[-2000:]
    losses = [json.loads(line)["loss"] for line in (folder / "metrics.jsonl").read_text().splitlines()
              if json.loads(line)["kind"] == "eval"]
    assert len(losses) >= 2 and losses[-1] < losses[0], losses
    assert any(device.startswith("cuda:") for device in summary["devices"]), summary["devices"]
    telemetry = summary.get("telemetry") or {}
    assert telemetry.get("gpu_percent_mean") is not None and telemetry.get("peak_gpu_mem_mb"), telemetry
    check = run_benchbase("check", str(folder / "mllog.log"), timeout=300)
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize(("backend", "precision"), [pytest.param("torch", "bf16", marks=needs_gpu("torch")),
                                                    pytest.param("torch", "fp16", marks=needs_gpu("torch")),
                                                    pytest.param("jax", "bf16", marks=needs_gpu("jax")),
                                                    pytest.param("jax", "fp16", marks=needs_gpu("jax"))])
def test_a_mixed_precision_transducer_run_on_the_gpu_is_scored_within_its_bound(tmp_path, small_store, backend,
                                                                                precision):
    """As bf16 on a CPU (tests/test_rnnt_run.py), with cuDNN's or XLA's half-precision kernels (fp16
    with its loss scaling): every evaluation's encoder projections agree with the reference within
    the error model's bound for the precision's operands, and the log passes `check`."""
    folder = tmp_path / "run"
    result = _gpu_run(backend, "rnnt-mini", small_store, folder, "--precision", precision, "--max-epochs", "2")
    assert result.returncode in (0, 3), result.stderr[-2000:]
    scores = [json.loads(line.split(" ", 1)[1])["value"] for line in (folder / "mllog.log").read_text().splitlines()
              if "benchbase_independent_score" in line]
    assert len(scores) >= 2 and all(score["agree"] for score in scores), scores
    check = run_benchbase("check", str(folder / "mllog.log"), timeout=300)
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]


def mixed_precision_against_float32(name: str, family: str, precision: str, device: str
                                    ) -> tuple[float, float, float]:
    """(the backend's own fp32 predictions' largest difference from the float64 reference, the
    ``precision`` predictions' largest difference, the precision's largest both-sides rounding bound)
    of the kit's ``family`` model on ``device``, on the kit's first batch at the reference's random
    weights (``numerics.predict_then_train``: three finite training steps in ``precision`` that
    leave float32 weights). Skips what the backend does not declare."""
    from numerics import half_outputs_against_bounds, predict_then_train

    from benchbase.families.parts import family_parts
    from benchbase.kit.conformance import Kit, resolve_backend
    from benchbase.kit.data import load_kit_data
    from benchbase.kit.int8 import in_precision

    backend_class = resolve_backend(name)
    if precision not in backend_class.capabilities.precisions_of(family):
        pytest.skip(f"backend {name!r} does not declare {precision} for {family}")
    data = load_kit_data(family=family)
    weights = family_parts(data.model).random_weights(data.model, data.feature_dimension, seed=1)
    inputs = data.batches[0].inputs()
    with Kit(backend_class, data, device=device).backend(model=in_precision(data.model, "fp32")) as backend:
        backend.import_weights(weights)
        float32 = backend.predict(inputs)
    found, devices = predict_then_train(backend_class, data, weights, precision, device)
    assert devices[0].startswith(device), devices
    _, float32_difference, _ = half_outputs_against_bounds(weights, data.model, inputs, float32, precision)
    _, difference, bound = half_outputs_against_bounds(weights, data.model, inputs, found, precision)
    return float32_difference, difference, bound


@pytest.mark.gpu
@pytest.mark.parametrize("family", model_families())
@pytest.mark.parametrize("precision", ["bf16", "fp16", "tf32"])
@pytest.mark.parametrize("name", [pytest.param("torch", marks=needs_gpu("torch")),
                                  pytest.param("jax", marks=needs_gpu("jax"))])
def test_a_mixed_precision_on_the_gpu_is_within_its_rounding_bound(name, precision, family):
    """The kit has rules for fp32 and int8-emulated only. A mixed precision on the GPU's tensor
    cores predicts within its operands' rounding bound of the float64 reference (both sides: which
    operands a framework narrows is its own choice), and visibly not in float32: farther from the
    reference than the backend's own fp32 (a rounding bound of float32 would not do: at fp16's 11
    bits, a tiny model's difference can stay below it). As bf16 on a CPU (tests/test_precision.py)."""
    float32_difference, difference, bound = mixed_precision_against_float32(name, family, precision, "cuda")
    assert float32_difference < difference <= bound

"""TensorFlow across machines: one process per machine under torchrun, a MultiWorkerMirroredStrategy.

Two torchrun invocations on this host stand in for two machines of one CPU each (``--hw cpu2``:
two devices, one per worker), meeting at a static rendezvous on 127.0.0.1 as in
tests/test_distributed.py. A plain ``benchbase run`` of the same profile, seed and store trains
the same global batches in one process on two logical CPUs; the two workers must match it.
Nothing is simulated: both are the command a user runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_benchbase, two_torchrun_nodes

from benchbase.numerics.tolerances import BOTH_SIDES, after_steps, same_kernels

pytestmark = pytest.mark.numerics  # `make test-isa` runs these again under a lower CPU ISA

if importlib.util.find_spec("benchbase_tf_ds2") is None:  # the test runs TensorFlow in subprocesses only
    pytest.skip("the TensorFlow backend is not installed", allow_module_level=True)

# Tolerances (benchbase.numerics.tolerances). The first batch: the same weights (worker 0's,
# broadcast to worker 1), the same global batch, the same dropout masks (drawn per global
# replica id) and BatchNorm over the global batch on both sides; the only difference is who
# adds the two replicas' partial sums, and a sum of two floats is the same in either order. So
# the first loss is the same computation (``same_kernels``; measured: bitwise equal). With each
# worker's BatchNorm statistics taken over its own half instead, the first loss missed by
# 1.5e-3 and the later ones by up to 1e-2; a loss not summed across the workers would be about
# half. After the first update the two part by float32 rounding: later losses and the final
# weights (as a share of their norm) within the rounding bound of the first global batch's
# loss at the initial weights (``bounded_step``, both sides), compounded over the steps
# (``after_steps``); measured at most 1.1e-5 over the epoch's 5 batches and 2.5e-5 of the
# weights' norm.

FIRST_LOSS_BOUND = r"""
import sys
from benchbase.data.store import FeatureStore
from benchbase.harness.assembly import build_context, run_pipeline
from benchbase.harness.devices import device_plan
from benchbase.specs import RunConfig
from benchbase.families.ds2.reference import bounded_step
from benchbase_tf_ds2.backend import TensorFlowBackend

config = RunConfig.model_validate_json(open(sys.argv[1]).read())
store = FeatureStore(config.data)
batch = next(iter(run_pipeline(config, store, config.workload.data.train, training=True).epoch(1)))
backend = TensorFlowBackend()
backend.build(build_context(config, store, device_plan(config.hardware, devices=1)))
step = bounded_step(backend.export_weights(), config.workload.model, batch)
print(step.loss_bound / abs(step.loss))
"""
"""Prints the relative rounding bound of the run's first loss: the seed's initial weights, the
harness's first global batch (in a fresh interpreter: this module keeps TensorFlow out of pytest's)."""

ONE_EPOCH = ("--workload", "ds2-mini", "--backend", "tf", "--hw", "cpu2", "--max-epochs", "1", "--no-final-eval")
SINGLE_THREADED = {**os.environ, "OMP_NUM_THREADS": "1"}


def _two_machines(store: Path, out: Path) -> list[tuple[int, str]]:
    """``benchbase run`` under two torchrun nodes of one process each; every node's exit code and stderr."""
    return [(code, stderr) for code, _, stderr, _ in
            two_torchrun_nodes([*ONE_EPOCH, "--data", str(store), "--out", str(out)])]


def _one_process(store: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchbase", "run", *ONE_EPOCH, "--data", str(store), "--out",
                           str(out)], capture_output=True, text=True, timeout=600, env=SINGLE_THREADED)


def _losses(out: Path) -> np.ndarray:
    return np.array([json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()
                     if '"kind": "batch"' in line])


def _model_weights(out: Path) -> list[np.ndarray]:
    """The model's float variables in the final checkpoint (the optimizer's state and dropout's seeds left out)."""
    with np.load(out / "checkpoints" / "final.ckpt") as saved:
        return [saved[key] for key in sorted(saved.files) if key.startswith("model/") and saved[key].dtype.kind == "f"]


@pytest.mark.slow
def test_two_tf_workers_train_the_run_one_process_trains_on_two_devices(small_store, tmp_path):
    workers_out, single_out = tmp_path / "two-workers", tmp_path / "one-process"
    nodes = _two_machines(small_store, workers_out)
    # rank 0's node passes on the aborted-at-max-epochs status (3) as a failure of that node;
    # the other node's rank leaves with 0.
    assert [code for code, _ in nodes] == [0, 0], [stderr[-3000:] for _, stderr in nodes]  # completed: 0 on every rank
    result = json.loads((workers_out / "result.json").read_text())
    assert result["world_size"] == 2 and result["status"] == "aborted" and result["stop_reason"] == "max_epochs"
    assert result["devices"] == ["rank 0: /job:worker/replica:0/task:0/device:CPU:0",
                                 "rank 1: /job:worker/replica:0/task:1/device:CPU:0"]
    assert result["device_plan"]["count"] == 2 and result["device_plan"]["batch_per_device"] == 16
    checked = run_benchbase("check", str(workers_out))
    assert checked.returncode == 0, checked.stdout[-3000:]

    single = _one_process(small_store, single_out)
    assert single.returncode == 3, single.stderr[-3000:]
    assert json.loads((single_out / "result.json").read_text())["world_size"] == 1

    one, two = _losses(single_out), _losses(workers_out)
    assert len(one) == len(two) > 1
    relative = np.abs(two - one) / np.abs(one)
    assert relative[0] <= same_kernels(1.0), relative  # relative: a handful of roundings
    bound = subprocess.run([sys.executable, "-c", FIRST_LOSS_BOUND, str(single_out / "config.json")],
                           capture_output=True, text=True, check=True, env=SINGLE_THREADED).stdout.split()[-1]
    first = BOTH_SIDES * float(bound)
    allowed = np.array([after_steps(first, step) for step in range(len(relative))])
    assert (relative <= allowed).all(), (relative, allowed)
    one_weights, two_weights = _model_weights(single_out), _model_weights(workers_out)
    difference = np.sqrt(sum(np.sum((a - b) ** 2) for a, b in zip(one_weights, two_weights)))
    norm = np.sqrt(sum(np.sum(a**2) for a in one_weights))
    assert difference <= after_steps(first, len(relative) - 1) * norm, (difference, norm)

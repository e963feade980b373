"""Data-parallel training with one process per device (PyTorch DDP on gloo, the cpu2 profile).

Every multi-process test here starts real processes through torch's launcher, the way a user's
`benchbase run --hw cpu2` or `torchrun` does; nothing is simulated.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from cli_helpers import run_benchbase, two_torchrun_nodes
from official_checker import check_common_rules

from benchbase.backend import Batch
from benchbase.errors import InputError
from benchbase.harness.devices import check_world, device_plan, own_slice
from benchbase.harness.world import World
from benchbase.numerics.tolerances import after_steps

WORKERS = Path(__file__).parent / "workers"


# --- the plan, without processes --------------------------------------------------------------


def test_the_plan_follows_the_profile_and_records_overrides(registry):
    cpu2, sys1 = registry.profile("cpu2"), registry.profile("sys1")
    plan = device_plan(cpu2, process_model="process_per_device", world=World(rank=1, size=2, local_rank=1,
                                                                             local_size=2))
    assert (plan.kind, plan.count, plan.batch_per_device, plan.threads) == ("cpu", 2, 16, 1)
    assert (plan.world_size, plan.rank, plan.local_rank, plan.overridden) == (2, 1, 1, False)
    # A single process driving both devices gets both devices' thread budget.
    assert device_plan(cpu2).threads == 2
    assert device_plan(sys1, devices=2).overridden and device_plan(sys1, devices=2).batch_per_device == 48
    assert device_plan(sys1, "cpu").overridden and device_plan(sys1, "cpu").count == 1
    with pytest.raises(InputError, match="does not split evenly over 5 devices"):
        device_plan(sys1, devices=5)


def test_each_rank_trains_its_own_contiguous_slice(registry):
    rows = 8
    batch = Batch(features=np.arange(rows * 3 * 2, dtype=np.float32).reshape(rows, 3, 2),
                  feature_lengths=np.full(rows, 3, np.int32), output_lengths=np.full(rows, 1, np.int32),
                  labels=np.arange(rows, dtype=np.int32)[:, None], label_lengths=np.ones(rows, np.int32),
                  utterance_ids=tuple(f"u{i}" for i in range(rows)), transcripts=tuple("x" * rows))
    profile = registry.profile("cpu2").model_copy(update={"pipeline": registry.profile("cpu2").pipeline.model_copy(
        update={"global_batch": rows, "batch_per_device": rows // 2})})
    slices = [own_slice(batch, device_plan(profile, process_model="process_per_device",
                                           world=World(rank=rank, size=2, local_rank=rank, local_size=2)))
              for rank in (0, 1)]
    assert [s.utterance_ids for s in slices] == [("u0", "u1", "u2", "u3"), ("u4", "u5", "u6", "u7")]
    assert np.array_equal(np.concatenate([s.features for s in slices]), batch.features)
    assert own_slice(batch, device_plan(profile)) is batch  # one process: the whole batch


def test_torchrun_environment_is_read_and_checked():
    world = World.from_environment({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                                    "GROUP_RANK": "1"})
    assert (world.rank, world.size, world.local_rank, world.node_rank, world.leader) == (3, 4, 1, 1, False)
    assert World.from_environment({}) == World()
    with pytest.raises(InputError, match="inconsistent"):
        World.from_environment({"RANK": "4", "WORLD_SIZE": "4"})


def test_a_world_that_does_not_fit_the_plan_is_refused(registry):
    from benchbase_torch_ds2.backend import TorchBackend

    cpu2 = registry.profile("cpu2")
    world = World(rank=0, size=3, local_rank=0, local_size=3)
    plan = device_plan(cpu2, process_model="process_per_device", world=world)
    with pytest.raises(InputError, match="torchrun started 3 processes, but hardware profile 'cpu2' plans 2"):
        check_world(TorchBackend, "torch", cpu2, plan, world)


# --- the command line refuses what the machine cannot do ---------------------------------------


def test_a_gpu_profile_on_a_machine_without_gpus_is_one_line():
    finished = run_benchbase("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "sys1", timeout=120)
    assert finished.returncode == 2
    lines = finished.stderr.strip().splitlines()
    assert len(lines) == 1, finished.stderr
    assert "plans 4 cuda device(s)" in lines[0] and "sees 0" in lines[0] and "--devices" in lines[0]


def test_torchrun_with_the_wrong_number_of_processes_is_one_line():
    environment = {"RANK": "0", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "3"}
    finished = run_benchbase("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu2", env=environment,
                             timeout=120)
    assert finished.returncode == 2
    assert finished.stderr.strip() == ("benchbase: error: rank 0: torchrun started 3 processes, but hardware profile "
                                       "'cpu2' plans 2 cpu devices, one process each; pass --devices 3 to train on 3 "
                                       "(the log records the override)")


def test_a_single_process_backend_under_torchrun_is_refused():
    environment = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    finished = run_benchbase("run", "--workload", "ds2-mini", "--backend", "jax", "--hw", "cpu", env=environment,
                             timeout=120)
    assert finished.returncode == 2
    assert "rank 1: backend 'jax' drives all its devices from one process; run it without torchrun" in finished.stderr


def test_a_process_per_machine_backend_wants_one_process_per_machine():
    environment = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    finished = run_benchbase("run", "--workload", "ds2-mini", "--backend", "tf", "--hw", "cpu2", env=environment,
                             timeout=120)
    assert finished.returncode == 2
    assert ("backend 'tf' drives all of a machine's devices from one process; run torchrun with --nproc-per-node 1"
            in finished.stderr)


# --- real processes ----------------------------------------------------------------------------


def _launch(processes: int, script: Path, *arguments: str, timeout: float = 300) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc-per-node={processes}", str(script), *arguments],
                          capture_output=True, text=True, timeout=timeout, env=environment)


@pytest.mark.slow
@pytest.mark.numerics
def test_one_and_two_ranks_train_the_same_global_batches(small_store, tmp_path):
    """The first 20 global batches on 1 process and on 2 (each its half of every batch) give the
    same losses and weights, to within what all-reducing float32 sums in another order changes.

    Bounds (benchbase.numerics.tolerances): the first loss within float32's rounding bound of the
    loss at the initial weights (both sides), computed by the reference on the first global
    batch; the k-th loss and the final weights (as a share of how far training moved them)
    within that bound compounded over the steps (``after_steps``). Measured: the first loss
    agrees to 1e-7 (relative), the first five to 5e-5, batch 20 to 0.3-1.4e-3. Without
    all-reduced BatchNorm statistics the first loss alone differs by 3e-3, far outside its bound.
    """
    runs = {}
    for processes in (1, 2):
        out = tmp_path / f"world-{processes}"
        out.mkdir()
        finished = _launch(processes, WORKERS / "ddp_equivalence.py", str(small_store), str(out), "20")
        assert finished.returncode == 0, finished.stderr[-3000:]
        runs[processes] = json.loads((out / "losses.json").read_text()), np.load(out / "weights.npz")
    (one, one_weights), (two, two_weights) = runs[1], runs[2]
    assert [shape[0] for shape in one["slice_shapes"]] == [8] * 20
    assert [shape[0] for shape in two["slice_shapes"]] == [4] * 20  # rank 0 trained only its half
    losses_one, losses_two = np.array(one["losses"]), np.array(two["losses"])
    relative = np.abs(losses_one - losses_two) / np.abs(losses_one)
    first = one["first_loss_bound"]
    assert relative[0] <= first, (relative[0], first)
    # BatchNorm after the first step, as the kit's rule: the global batch's statistics, biased variance.
    assert one["statistics_excess"] <= 0 and two["statistics_excess"] <= 0, (one["statistics_excess"],
                                                                               two["statistics_excess"])
    allowed = np.array([after_steps(first, step) for step in range(len(relative))])
    assert (relative <= allowed).all(), (relative, allowed)
    initial = np.load(tmp_path / "world-1" / "initial.npz")
    moved = np.sqrt(sum(np.sum((one_weights[name] - initial[name]) ** 2) for name in one_weights.files))
    drift = np.sqrt(sum(np.sum((two_weights[name] - one_weights[name]) ** 2) for name in one_weights.files))
    assert drift <= after_steps(first, len(relative) - 1) * moved, (drift, moved)


def _cli_run(tmp_path: Path, store: Path, *extra: str) -> tuple[Path, subprocess.Popen]:
    out = tmp_path / "run"
    command = [sys.executable, "-m", "benchbase", "run", "--workload", "ds2-mini", "--backend", "torch", "--hw",
               "cpu2", "--data", str(store), "--out", str(out), "--no-final-eval", *extra]
    return out, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True)


@pytest.mark.slow
def test_cpu2_trains_in_two_processes_and_its_log_passes(small_store, tmp_path):
    out, process = _cli_run(tmp_path, small_store, "--max-epochs", "1", "--profile-steps", "2")
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 3, stderr[-3000:]  # aborted at max_epochs: a status, not a failure
    assert stdout.count("run folder:") == 1
    result = json.loads((out / "result.json").read_text())
    assert result["world_size"] == 2 and result["status"] == "aborted"
    assert result["devices"] == ["rank 0: cpu (1 threads)", "rank 1: cpu (1 threads)"]
    assert result["device_plan"] == {"kind": "cpu", "count": 2, "batch_per_device": 16, "world_size": 2,
                                     "profile_kind": "cpu", "profile_count": 2, "overridden": False}
    breakdown = result["step_breakdown"]
    assert 0 < breakdown["communication_s"] < breakdown["step_s"]
    batches = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
               if '"kind": "batch"' in line]
    assert batches and all(batch["utterances"] == 32 and batch["comm_s"] > 0 for batch in batches)
    assert (out / "profile" / "torch-trace.json").stat().st_size > 1000
    passed, messages = check_common_rules(out / "mllog.log", tmp_path)
    assert passed, messages
    checked = run_benchbase("check", str(out))
    assert checked.returncode == 0, checked.stdout[-3000:]


def _rank_process(launcher: psutil.Process, rank: int) -> psutil.Process | None:
    for child in launcher.children(recursive=True):
        try:
            environment = child.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if environment.get("RANK") == str(rank) and "benchbase" in " ".join(child.cmdline()):
            return child
    return None


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["sync", "adpsgd"])
def test_killing_one_rank_ends_the_run_aborted_and_logged(small_store, tmp_path, strategy):
    """Under sync rank 0 meets the dead rank in the next all-reduce; under adpsgd, in the gossip's
    receive from its peer or the verdict after the batch, whichever comes first."""
    out, process = _cli_run(tmp_path, small_store, "--max-epochs", "50", "--strategy", strategy)
    launcher = psutil.Process(process.pid)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            metrics = out / "metrics.jsonl"
            if metrics.exists() and metrics.read_text().count('"kind": "batch"') >= 3:
                break
            assert process.poll() is None, process.communicate()[1][-3000:]
            time.sleep(0.2)
        victim = _rank_process(launcher, 1)
        assert victim is not None
        everyone = launcher.children(recursive=True)
        killed_at = time.monotonic()
        victim.send_signal(signal.SIGKILL)
        _, stderr = process.communicate(timeout=60)
        ended_after = time.monotonic() - killed_at
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert ended_after < 15, ended_after
    assert process.returncode not in (0, 3)
    last = json.loads((out / "mllog.log").read_text().strip().splitlines()[-1].partition(" ")[2])
    assert last["key"] == "run_stop" and last["metadata"]["status"] == "aborted"
    assert last["metadata"]["stop_reason"] == "error"
    assert "rank 1: the process ended without a report" in last["metadata"]["error"]
    assert "rank 1 exited with code -9" in stderr
    assert not [child for child in everyone if child.is_running() and child.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.slow
@pytest.mark.parametrize("rendezvous", ["static", "c10d"])
def test_two_torchrun_nodes_train_one_run_together_and_leave_with_one_exit_code(small_store, tmp_path, rendezvous):
    """Two torchrun invocations (two 'machines', one process each) meet at one rendezvous, the
    static one and the c10d one of the cluster recipes. The run completes aborted (max_epochs):
    every rank leaves with 0, so neither agent reports a failed worker and neither waits at its
    exit barrier for the other (300 s before every rank left with the run's one exit code)."""
    out = tmp_path / "run"
    outputs = two_torchrun_nodes(["--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu2", "--data",
                                  str(small_store), "--out", str(out), "--max-epochs", "1", "--no-final-eval"],
                                 rendezvous=rendezvous)
    assert [code for code, *_ in outputs] == [0, 0], [stderr[-2000:] for _, _, stderr, _ in outputs]
    assert not any("ChildFailedError" in stderr for _, _, stderr, _ in outputs)
    ended = [seconds for *_, seconds in outputs]
    assert max(ended) - min(ended) < 30, ended
    result = json.loads((out / "result.json").read_text())
    assert result["world_size"] == 2 and len(result["devices"]) == 2
    assert result["status"] == "aborted" and result["stop_reason"] == "max_epochs"

"""One rank of the data-parallel equivalence test, started by torch's launcher (torchrun).

Trains the PyTorch backend on the first BATCHES global batches of the harness's own pipeline,
each rank on its own slice (the harness's own_slice), and rank 0 writes the losses and the
final weights to OUT. Run with 1 and with 2 processes, the two files must agree to within
the all-reduce's rounding. Dropout is 0: with dropout each rank draws its own masks, which a
single process draws differently, and the comparison would measure that instead.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from benchbase_torch_ds2.backend import TorchBackend

from benchbase.data.store import FeatureStore
from benchbase.families.ds2.reference import batchnorm_names, bounded_step
from benchbase.harness.assembly import build_context, run_pipeline
from benchbase.harness.devices import device_plan, own_slice
from benchbase.harness.world import World, coordinator_for
from benchbase.kit.step_rules import largest_statistic_excess
from benchbase.numerics.tolerances import BOTH_SIDES
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.specs import RunConfig

GLOBAL_BATCH = 8


def main(store_path: str, out: str, batches: int, precision: str) -> None:
    world = World.from_environment()
    coordinator = coordinator_for(world, "cpu", timeout_seconds=300)
    registry = collect_registry(get_plugin_manager(load_entrypoints=False))
    workload = registry.workload("ds2-mini")
    workload = workload.model_copy(update={"model": workload.model.model_copy(
        update={"dropout": 0.0, "precision": precision})})
    hardware = registry.profile("cpu2").model_copy(update={"pipeline": registry.profile("cpu2").pipeline.model_copy(
        update={"global_batch": GLOBAL_BATCH, "batch_per_device": GLOBAL_BATCH // 2})})
    config = RunConfig(workload=workload, backend="torch", hardware=hardware, out=Path(out), data=Path(store_path))
    plan = device_plan(hardware, devices=world.size, process_model="process_per_device", world=world)
    store = FeatureStore(config.data)
    pipeline = run_pipeline(config, store, workload.data.train, training=True)
    backend = TorchBackend()
    backend.build(build_context(config, store, plan))
    initial = backend.export_weights()
    losses, shapes, epoch, first_batch, after_first = [], [], 0, None, None
    while len(losses) < batches:
        epoch += 1
        for batch in pipeline.epoch(epoch):
            mine = own_slice(batch, plan)
            shapes.append(list(mine.features.shape))
            losses.append(backend.train_step(mine))
            if first_batch is None:  # the global batch and the weights after it, for the bounds below
                first_batch, after_first = batch, backend.export_weights()
            if len(losses) == batches:
                break
    if world.leader:
        # The reference's bounds, after training (a rank busy for seconds between collectives
        # would hold the others in theirs): the first loss at the initial weights, and BatchNorm
        # after the first step, both for the first global batch.
        step = bounded_step(initial, workload.model, first_batch)
        first_loss_bound = BOTH_SIDES * step.loss_bound / abs(step.loss)
        statistics_excess = largest_statistic_excess(initial, after_first, batchnorm_names(workload.model), step)
        weights = backend.export_weights()
        np.savez(Path(out) / "weights.npz", **weights)
        np.savez(Path(out) / "initial.npz", **initial)
        (Path(out) / "losses.json").write_text(json.dumps({"losses": losses, "slice_shapes": shapes,
                                                            "first_loss_bound": first_loss_bound,
                                                            "statistics_excess": statistics_excess,
                                                            "devices": list(backend.devices_in_use())}))
    coordinator.barrier()  # no rank closes its process group while the leader still works
    backend.close()
    coordinator.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else "fp32")

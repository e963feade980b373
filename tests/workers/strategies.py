"""One rank of the training-strategy tests, started by torch's launcher (torchrun).

``train STORE OUT STRATEGY_JSON STEPS``: the PyTorch backend trains rnnt-mini (no BatchNorm, so
every learner's forward pass is its own; dropout 0; SGD with momentum, whose update is linear in
the gradient) on the harness's first STEPS global batches of 8, each rank on its own slice, under
the strategy STRATEGY_JSON states; rank 0 writes its weights and the initial ones to OUT.

``gossip OUT PEER``: one exchange of ADPSGD's gossip on a small vector whose value is the rank;
every rank writes what it holds after the exchange to OUT/gossip-RANK.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from benchbase_torch_ds2.backend import TorchBackend
from benchbase_torch_ds2.strategies.base import CommunicationMeter
from benchbase_torch_ds2.strategies.gossip import Gossip

from benchbase.data.store import FeatureStore
from benchbase.harness.assembly import build_context, run_pipeline
from benchbase.harness.devices import device_plan, own_slice
from benchbase.harness.world import World, coordinator_for
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry
from benchbase.specs import RunConfig
from benchbase.specs.optimizer import SGDSpec
from benchbase.specs.strategy import validate_strategy

GLOBAL_BATCH = 8


def train(store_path: str, out: str, strategy_json: str, steps: int) -> None:
    world = World.from_environment()
    coordinator = coordinator_for(world, "cpu", timeout_seconds=300)
    registry = collect_registry(get_plugin_manager(load_entrypoints=False))
    workload = registry.workload("rnnt-mini")
    workload = workload.model_copy(update={"model": workload.model.model_copy(update={"dropout": 0.0}),
                                           "optimizer": SGDSpec(learning_rate=0.002, momentum=0.9)})
    profile = registry.profile("cpu2")
    hardware = profile.model_copy(update={"pipeline": profile.pipeline.model_copy(
        update={"global_batch": GLOBAL_BATCH, "batch_per_device": GLOBAL_BATCH // world.size})})
    config = RunConfig(workload=workload, backend="torch", hardware=hardware, out=Path(out), data=Path(store_path),
                       strategy=validate_strategy(json.loads(strategy_json)))
    plan = device_plan(hardware, devices=world.size, process_model="process_per_device", world=world)
    store = FeatureStore(config.data)
    pipeline = run_pipeline(config, store, workload.data.train, training=True)
    backend = TorchBackend()
    backend.build(build_context(config, store, plan))
    initial = backend.export_weights()
    trained = 0
    for batch in pipeline.epoch(1):
        backend.train_step(own_slice(batch, plan))
        trained += 1
        if trained == steps:
            break
    if world.leader:
        np.savez(Path(out) / "weights.npz", **backend.export_weights())
        np.savez(Path(out) / "initial.npz", **initial)
    coordinator.barrier()
    backend.close()
    coordinator.close()


def gossip(out: str, peer: str) -> None:
    world = World.from_environment()
    coordinator = coordinator_for(world, "cpu", timeout_seconds=300)
    held = [torch.nn.Parameter(torch.full((5,), float(world.rank))), torch.nn.Parameter(torch.full((2, 3), -1.0))]
    exchange = Gossip(held, list(range(world.size)), world.rank, peer, seed=7, meter=CommunicationMeter())
    for _ in range(2):
        exchange.start()
        exchange.finish()
    Path(out, f"gossip-{world.rank}.json").write_text(json.dumps(
        {"first": held[0].detach().tolist(), "second": held[1].detach().flatten().tolist(),
         "bytes": exchange.meter.bytes}))
    coordinator.barrier()
    coordinator.close()


if __name__ == "__main__":
    if sys.argv[1] == "train":
        train(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        gossip(sys.argv[2], sys.argv[3])

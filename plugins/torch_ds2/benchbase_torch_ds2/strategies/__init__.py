"""Training strategies of the torch backend: how its learners combine their work.

Every strategy is built from torch.distributed's own parts: DistributedDataParallel and its
communication hooks (the gradient all-reduce, PowerSGD, float16 and bfloat16 compression,
post-local SGD), torch's model averager, and point-to-point sends for the gossip of ADPSGD.
A strategy gives the backend the module that training runs forward through and two calls around
the optimizer step; the backend's ``train_step`` is the same for all of them.

What each strategy communicates is counted as it goes (``CommunicationMeter``): the payload
bytes this learner hands to collectives and sends, and the seconds until they complete.
"""

from __future__ import annotations

import torch

from benchbase.backend import BuildContext
from benchbase.errors import BenchbaseError
from benchbase_torch_ds2.strategies.base import CommunicationMeter, TrainingStrategy

__all__ = ["IMPLEMENTED", "CommunicationMeter", "TrainingStrategy", "build_strategy", "synchronizes_statistics"]

IMPLEMENTED = frozenset({"sync", "local_sgd", "hierarchical", "powersgd", "fp16_compress", "bf16_compress", "adpsgd",
                         "h-adpsgd"})

_SYNCHRONOUS = frozenset({"sync", "powersgd", "fp16_compress", "bf16_compress"})


def synchronizes_statistics(context: BuildContext) -> bool:
    """Whether the model's batch statistics (DS2's BatchNorm, the int8 quantizer's ranges) are
    all-reduced over every learner in the forward pass: under the synchronous strategies, where
    every learner holds one model; under the others each learner keeps its own."""
    return context.plan.distributed and context.strategy.name in _SYNCHRONOUS


def build_strategy(context: BuildContext, network: torch.nn.Module, device: torch.device) -> TrainingStrategy:
    """The strategy ``context.strategy`` names, around ``network`` (already on ``device``)."""
    from benchbase_torch_ds2.strategies import data_parallel, gossip

    name = context.strategy.name
    if not context.plan.distributed:
        if name != "sync":
            raise BenchbaseError(f"training strategy {name!r} needs several learners; this run has one")
        return TrainingStrategy(network)
    builders = {"sync": data_parallel.synchronous, "powersgd": data_parallel.synchronous,
                "fp16_compress": data_parallel.synchronous, "bf16_compress": data_parallel.synchronous,
                "local_sgd": data_parallel.local_sgd, "hierarchical": data_parallel.hierarchical,
                "adpsgd": gossip.adpsgd, "h-adpsgd": gossip.hierarchical_adpsgd}
    if name not in builders:
        raise BenchbaseError(f"the torch backend has no training strategy {name!r}")
    return builders[name](context, network, device)

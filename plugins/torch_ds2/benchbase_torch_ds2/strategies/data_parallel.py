"""Strategies on DistributedDataParallel: its gradient all-reduce, replaced or bracketed by torch's own
communication hooks and model averager.

- sync: DDP's all-reduce of every gradient bucket, every step (the paper's way).
- powersgd, fp16_compress, bf16_compress: the same step with each bucket all-reduced compressed
  (torch's ``powerSGD_hook``, ``fp16_compress_hook``, ``bf16_compress_hook``).
- local_sgd: post-local SGD (Lin et al., "Don't use large mini-batches, use local SGD"): torch's
  ``post_localSGD_hook`` all-reduces gradients for ``warmup_steps``, then lets each learner step
  on its own gradient, and ``PeriodicModelAverager`` averages the models every ``period`` steps.
- hierarchical: the same hook all-reducing within each group of learners every step, and the
  averager across every learner every ``period`` steps.

Each hook is wrapped to count its payload (the bytes it hands to the all-reduce) and time it.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, post_localSGD_hook, powerSGD_hook
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
from torch.nn.parallel import DistributedDataParallel

from benchbase.backend import BuildContext
from benchbase.specs.strategy import HierarchicalSpec, LocalSGDSpec, PowerSGDSpec
from benchbase_torch_ds2.strategies.base import CommunicationMeter, TrainingStrategy, learner_groups

__all__ = ["hierarchical", "local_sgd", "metered_allreduce", "synchronous"]

PayloadBytes = Callable[[Any, dist.GradBucket], int]


class _MeteredHook:
    """A DDP communication hook with its state, and how many bytes it sends for a bucket."""

    def __init__(self, meter: CommunicationMeter, hook: Callable, state: Any, payload: PayloadBytes) -> None:
        self.meter, self.hook, self.state, self.payload = meter, hook, state, payload
        self.uncompressed_steps = 0
        """PowerSGD resumed from a checkpoint: steps to all-reduce whole first (see DataParallel.load_state_dict)."""


def _metered(wrapper: _MeteredHook, bucket):
    """Run the wrapped hook, timed from the moment the bucket is ready to the moment it is reduced.

    No return annotation: DDP accepts only the evaluated Future[Tensor] type there."""
    started = time.perf_counter()

    def finished(future: torch.futures.Future) -> torch.Tensor:
        wrapper.meter.seconds += time.perf_counter() - started
        return future.value()

    if wrapper.uncompressed_steps:
        wrapper.meter.bytes += bucket.buffer().nbytes
        if bucket.is_last():  # the step PowerSGD's own count would have taken
            wrapper.state.iter += 1
            wrapper.uncompressed_steps -= 1
        return default_hooks.allreduce_hook(None, bucket).then(finished)
    wrapper.meter.bytes += wrapper.payload(wrapper.state, bucket)  # before the hook: it advances its step count
    return wrapper.hook(wrapper.state, bucket).then(finished)


def _full(state: Any, bucket: dist.GradBucket) -> int:
    return bucket.buffer().nbytes


def _nothing(state: Any, bucket: dist.GradBucket) -> int:
    return 0


def _half(state: Any, bucket: dist.GradBucket) -> int:
    return bucket.buffer().numel() * 2


class DataParallel(TrainingStrategy):
    """DDP around the network, with a metered hook; ``averager`` (if any) after each optimizer step."""

    def __init__(self, network: torch.nn.Module, device: torch.device, hook: Callable, state: Any,
                 payload: PayloadBytes, averager: PeriodicModelAverager | None = None) -> None:
        # Batch statistics are all-reduced in the forward pass or kept per learner (synchronizes_statistics),
        # never broadcast from rank 0 before each forward pass.
        device_ids = [device.index] if device.type == "cuda" else None
        super().__init__(DistributedDataParallel(network, device_ids=device_ids, forward_sync_buffers=False))
        self.hook = _MeteredHook(self.meter, hook, state, payload)
        self.model.register_comm_hook(self.hook, _metered)
        self.averager = averager
        self.averaged = [p for p in network.parameters() if p.requires_grad]

    def state_dict(self) -> dict:
        """The hook's step count (post-local SGD: when the warm-up ends; PowerSGD: when compression
        starts, and its random state) and the averager's: a resumed learner averages, compresses and
        goes local at the steps it would have."""
        state: dict = {}
        hook_state = self.hook.state
        if isinstance(hook_state, post_localSGD_hook.PostLocalSGDState):
            state["hook"] = {"iter": hook_state.iter}
        elif isinstance(hook_state, powerSGD_hook.PowerSGDState):
            name, words, position, has_gauss, gauss = hook_state.rng.get_state()
            state["hook"] = {"iter": hook_state.iter,
                             "rng": (name, torch.from_numpy(words.astype(np.int64)), position, has_gauss, gauss)}
        if self.averager is not None:
            state["averager_step"] = self.averager.step
        return state

    def load_state_dict(self, state: dict) -> None:
        hook_state, saved = self.hook.state, state.get("hook")
        if saved is not None and isinstance(hook_state, post_localSGD_hook.PostLocalSGDState):
            hook_state.iter = int(saved["iter"])
        elif saved is not None and isinstance(hook_state, powerSGD_hook.PowerSGDState):
            # PowerSGD keys its error feedback and warm-start memories by DDP's gradient buckets, which
            # DDP lays out anew in a new process and again after its first step (why PowerSGD itself
            # starts compressing at step 2 at the earliest). So a resumed learner starts them afresh:
            # its first step all-reduces whole, then compression goes on from empty memories. The
            # batches and the schedule are the uninterrupted run's; the compressed gradients are not
            # bit for bit.
            hook_state.iter = int(saved["iter"])
            name, words, position, has_gauss, gauss = saved["rng"]
            hook_state.rng.set_state((name, words.numpy().astype(np.uint32), int(position), int(has_gauss),
                                      float(gauss)))
            if hook_state.iter >= hook_state.start_powerSGD_iter:
                self.hook.uncompressed_steps = 1
        if self.averager is not None and "averager_step" in state:
            self.averager.step = int(state["averager_step"])

    def after_step(self) -> None:
        if self.averager is None:
            return
        averager = self.averager
        due = averager.step >= averager.warmup_steps and (averager.step - averager.warmup_steps) % averager.period == 0
        started = time.perf_counter()
        averager.average_parameters(self.averaged)
        if due:
            self.meter.seconds += time.perf_counter() - started
            self.meter.bytes += sum(p.nbytes for p in self.averaged if p.grad is not None)


def metered_allreduce(model: DistributedDataParallel, meter: CommunicationMeter, group: dist.ProcessGroup) -> None:
    """DDP's own all-reduce over ``group``, metered (the groups of hierarchical ADPSGD)."""
    payload = _full if group.size() > 1 else _nothing  # a group of one learner all-reduces nothing
    model.register_comm_hook(_MeteredHook(meter, default_hooks.allreduce_hook, group, payload), _metered)


def synchronous(context: BuildContext, network: torch.nn.Module, device: torch.device) -> DataParallel:
    """Every step's gradients averaged over every learner: plain, or compressed as the strategy says."""
    strategy = context.strategy
    if isinstance(strategy, PowerSGDSpec):
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=strategy.matrix_approximation_rank,
            start_powerSGD_iter=strategy.start_iteration, use_error_feedback=strategy.use_error_feedback,
            warm_start=True, random_seed=context.seed)
        return DataParallel(network, device, powerSGD_hook.powerSGD_hook, state, _powersgd_payload)
    hooks = {"sync": (default_hooks.allreduce_hook, _full), "fp16_compress": (default_hooks.fp16_compress_hook, _half),
             "bf16_compress": (default_hooks.bf16_compress_hook, _half)}
    hook, payload = hooks[strategy.name]
    return DataParallel(network, device, hook, None, payload)


def local_sgd(context: BuildContext, network: torch.nn.Module, device: torch.device) -> DataParallel:
    strategy = context.strategy
    assert isinstance(strategy, LocalSGDSpec)
    state = post_localSGD_hook.PostLocalSGDState(process_group=None, subgroup=None,
                                                 start_localSGD_iter=strategy.warmup_steps,
                                                 post_local_gradient_allreduce=False)
    return DataParallel(network, device, post_localSGD_hook.post_localSGD_hook, state, _post_local_payload,
                        _averager(strategy.period, strategy.warmup_steps))


def hierarchical(context: BuildContext, network: torch.nn.Module, device: torch.device) -> DataParallel:
    strategy = context.strategy
    assert isinstance(strategy, HierarchicalSpec)
    size = learner_groups(strategy.group_size, context.plan.world_size)
    group, _ = dist.new_subgroups(group_size=size)  # every rank creates every group, in the same order
    state = post_localSGD_hook.PostLocalSGDState(process_group=None, subgroup=group, start_localSGD_iter=0,
                                                 post_local_gradient_allreduce=True)
    return DataParallel(network, device, post_localSGD_hook.post_localSGD_hook, state, _post_local_payload,
                        _averager(strategy.period, 0))


def _averager(period: int, warmup_steps: int) -> PeriodicModelAverager:
    with warnings.catch_warnings():
        # period 1 averages the models every step: allowed (it is how local SGD meets sync), torch warns
        warnings.filterwarnings("ignore", message="When period is 1")
        return PeriodicModelAverager(period=period, warmup_steps=warmup_steps)


def _post_local_payload(state: post_localSGD_hook.PostLocalSGDState, bucket: dist.GradBucket) -> int:
    if state.iter < state.start_localSGD_iter:
        return bucket.buffer().nbytes  # the warm-up's all-reduce over every learner
    if state.post_local_gradient_allreduce and state.subgroup is not None and state.subgroup.size() > 1:
        return bucket.buffer().nbytes  # the all-reduce within this learner's group
    return 0


def _powersgd_payload(state: powerSGD_hook.PowerSGDState, bucket: dist.GradBucket) -> int:
    """What ``powerSGD_hook`` all-reduces for ``bucket``: the whole bucket before ``start_powerSGD_iter``;
    after it, vectors and the matrices not worth compressing whole, and P and Q of the others."""
    if state.iter < state.start_powerSGD_iter:
        return bucket.buffer().nbytes
    total = 0
    for gradient in bucket.gradients():  # as the hook views each: a matrix of its first dimension's rows
        rows = gradient.shape[0] if gradient.ndimension() else 1
        columns = gradient.numel() // max(rows, 1)
        rank = min(rows, columns, state.matrix_approximation_rank)
        compress, uncompressed, compressed = powerSGD_hook._should_compress(
            rows, columns, rank, state.min_compression_rate)
        total += (compressed if compress else uncompressed) * gradient.element_size()
    return total

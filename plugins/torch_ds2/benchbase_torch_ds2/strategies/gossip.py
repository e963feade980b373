"""ADPSGD and hierarchical ADPSGD: decentralized averaging with one peer per step, on torch.distributed's
point-to-point sends.

Asynchronous decentralized parallel SGD (Lian et al., 2018; Zhang et al., INTERSPEECH 2019 for
ASR) replaces the global all-reduce by gossip. At each step a learner sends its weights x_i to
one peer and receives another peer's x_j, while (concurrently) it computes its gradient at x_i;
then it steps on that gradient from the average: x_i <- (x_i + x_j) / 2 - update(gradient(x_i)).
Peers follow a ring shifted by s: learner i sends to i + s and receives from i - s (mod n), s = 1
("ring") or drawn per step from the run's seed ("random"; the same draw on every learner, so the
sends match). Each step's mixing matrix (I + P_s) / 2 is doubly stochastic: the learners' mean
model moves exactly as one SGD step on the mean gradient would move it.

How asynchronous it is here: the exchange overlaps the forward and backward passes, and no
learner waits for any but its two peers' messages. The harness's one-number verdict after every
batch (rank 0 decides whether the run goes on) meets every learner once per step, so a learner
is never more than one step ahead of any other: the staleness of a received model is bounded by
one step (the paper's ADPSGD lets a fast learner run further ahead; on learners of equal speed,
as here, that bound is what they would reach anyway). The run ends for every learner at the same
verdict; a learner that dies breaks its peers' next receive and the verdict's all-reduce, which
ends the run (docs/design.md, "Training strategies").

Hierarchical ADPSGD: the learners of a group (a machine's processes) average gradients every step
through DDP over their group's process group, so they hold one model, a super-learner; the groups
gossip, learner k of one group with learner k of its peer group, so every member receives the
same peer model and the group stays one model.
"""

from __future__ import annotations

import random
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from benchbase.backend import BuildContext
from benchbase.errors import BenchbaseError
from benchbase.specs.strategy import ADPSGDSpec, HADPSGDSpec
from benchbase_torch_ds2.strategies.base import CommunicationMeter, TrainingStrategy, learner_groups
from benchbase_torch_ds2.strategies.data_parallel import metered_allreduce

__all__ = ["Gossip", "adpsgd", "hierarchical_adpsgd"]


class Gossip:
    """One learner's side of the weight exchange among ``ring`` (global ranks in ring order)."""

    def __init__(self, parameters: list[torch.nn.Parameter], ring: list[int], position: int, peer: str, seed: int,
                 meter: CommunicationMeter) -> None:
        if len(ring) < 2:
            raise BenchbaseError("gossip needs at least two learners (or groups) to exchange weights")
        self.parameters, self.ring, self.position, self.meter = parameters, ring, position, meter
        self.shifts = random.Random(seed) if peer == "random" else None
        self.pending: list[dist.Work] = []

    def start(self) -> None:
        """Send this learner's weights to its peer and post the receive of the other peer's."""
        n = len(self.ring)
        shift = self.shifts.randrange(1, n) if self.shifts is not None else 1
        self.sent = parameters_to_vector(self.parameters).detach().clone()
        self.received = torch.empty_like(self.sent)
        self.started = time.perf_counter()
        self.pending = [dist.isend(self.sent, self.ring[(self.position + shift) % n]),
                        dist.irecv(self.received, self.ring[(self.position - shift) % n])]
        self.meter.bytes += self.sent.nbytes

    def finish(self) -> None:
        """Wait for the exchange, then move halfway toward the received model: x += (x_peer - x_sent) / 2,
        which is the average of both models plus this step's own update."""
        for work in self.pending:
            work.wait()
        self.meter.seconds += time.perf_counter() - self.started
        self.pending = []
        with torch.no_grad():
            weights = parameters_to_vector(self.parameters)
            weights.add_(self.received.sub_(self.sent), alpha=0.5)
            vector_to_parameters(weights, self.parameters)


class GossipStrategy(TrainingStrategy):
    def __init__(self, model: torch.nn.Module, gossip: Gossip) -> None:
        super().__init__(model, gossip.meter)
        self.gossip = gossip

    def before_step(self) -> None:
        self.gossip.start()

    def after_step(self) -> None:
        self.gossip.finish()

    def state_dict(self) -> dict:
        # The peer draws go on where they stopped: a resumed learner gossips with the peers it would have.
        return {} if self.gossip.shifts is None else {"shifts": self.gossip.shifts.getstate()}

    def load_state_dict(self, state: dict) -> None:
        if "shifts" in state and self.gossip.shifts is not None:
            self.gossip.shifts.setstate(_random_state(state["shifts"]))


def _random_state(saved) -> tuple:
    """random.Random's state as a checkpoint gives it back (its tuples may come back as lists)."""
    version, internal, gauss = saved
    return int(version), tuple(int(word) for word in internal), gauss


def adpsgd(context: BuildContext, network: torch.nn.Module, device: torch.device) -> GossipStrategy:
    strategy = context.strategy
    assert isinstance(strategy, ADPSGDSpec)
    world, rank = context.plan.world_size, context.plan.rank
    parameters = [p for p in network.parameters() if p.requires_grad]
    return GossipStrategy(network, Gossip(parameters, list(range(world)), rank, strategy.peer, context.seed,
                                          CommunicationMeter()))


def hierarchical_adpsgd(context: BuildContext, network: torch.nn.Module, device: torch.device) -> GossipStrategy:
    strategy = context.strategy
    assert isinstance(strategy, HADPSGDSpec)
    world, rank = context.plan.world_size, context.plan.rank
    size = learner_groups(strategy.group_size, world)
    if world // size < 2:
        raise BenchbaseError(f"h-adpsgd: {world} learners make one group of {size}, with no other group to gossip "
                             f"with; set strategy.group_size to a divisor of {world} below it")
    group, _ = dist.new_subgroups(group_size=size)  # every rank creates every group, in the same order
    device_ids = [device.index] if device.type == "cuda" else None
    model = DistributedDataParallel(network, device_ids=device_ids, forward_sync_buffers=False, process_group=group)
    meter = CommunicationMeter()
    metered_allreduce(model, meter, group)
    parameters = [p for p in network.parameters() if p.requires_grad]
    ring = [first + rank % size for first in range(0, world, size)]  # learner `rank % size` of every group
    return GossipStrategy(model, Gossip(parameters, ring, rank // size, strategy.peer, context.seed, meter))

"""What every training strategy of the torch backend is: a module to train, two calls around the step."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from benchbase.errors import BenchbaseError

__all__ = ["CommunicationMeter", "TrainingStrategy", "learner_groups"]


@dataclass
class CommunicationMeter:
    """This learner's communication in the current step: payload bytes handed to collectives and
    sends, and the seconds from handing them over to their completion (which may overlap computation)."""

    seconds: float = 0.0
    bytes: int = 0

    def reset(self) -> None:
        self.seconds, self.bytes = 0.0, 0


class TrainingStrategy:
    """One learner training alone: the network itself, nothing to communicate. Strategies of several
    learners override ``before_step`` (forward pass next) and ``after_step`` (the optimizer has stepped)."""

    def __init__(self, model: torch.nn.Module, meter: CommunicationMeter | None = None) -> None:
        self.model = model
        self.meter = meter or CommunicationMeter()

    def before_step(self) -> None:
        """Called before the forward pass of each training step."""

    def after_step(self) -> None:
        """Called after the optimizer's step (skipped steps included)."""

    def state_dict(self) -> dict:
        """What this learner's strategy carries from step to step (step counters, a random draw's
        state, error feedback), for the backend's checkpoint: tensors, numbers, tuples and dicts."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what ``state_dict`` returned (an empty dict: a checkpoint without it, as fresh)."""


def learner_groups(group_size: int | None, world_size: int) -> int:
    """The learners per group of a two-level strategy: ``group_size``, or the processes of one
    machine (torchrun's LOCAL_WORLD_SIZE); the world must divide into whole groups."""
    size = group_size or int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    if size < 1 or world_size % size:
        raise BenchbaseError(f"{world_size} learners do not divide into groups of {size} (strategy.group_size)")
    return size

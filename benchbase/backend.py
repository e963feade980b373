"""The contract between the harness and a backend.

A backend builds the model, runs training steps and returns per-frame log-probabilities.
Everything that decides the score (clock, data order, decoding, metrics) stays in the
harness, so a backend cannot change how it is measured.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np

from benchbase.specs import ModelSpec, OptimizerSpec

__all__ = ["Backend", "BackendReference", "Batch", "DevicePlan"]


@dataclass(frozen=True)
class Batch:
    """A padded batch, as numpy arrays the harness's pipeline produces for every backend."""

    features: np.ndarray
    """float32 (batch, frames, features), right-padded with zeros."""
    feature_lengths: np.ndarray
    """int32 (batch,): valid frames per utterance."""
    labels: np.ndarray
    """int32 (batch, max_label_length), right-padded with the blank index."""
    label_lengths: np.ndarray
    """int32 (batch,): valid labels per utterance."""
    utterance_ids: tuple[str, ...]
    transcripts: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.utterance_ids)


@dataclass(frozen=True)
class DevicePlan:
    """Where and how wide a backend trains, resolved from the hardware profile."""

    kind: Literal["cpu", "cuda"]
    count: int
    batch_per_device: int
    threads: int | None = None
    """CPU compute threads (None: the framework's default)."""


class Backend(ABC):
    """Base class of every backend; register subclasses through ``register_backends``."""

    name: ClassVar[str]
    """Name users pass to ``--backend``."""
    description: ClassVar[str] = ""

    @abstractmethod
    def build(
        self, model: ModelSpec, optimizer: OptimizerSpec, feature_dimension: int, plan: DevicePlan, seed: int
    ) -> None:
        """Create the model and optimizer. The harness starts the run clock just before."""

    @abstractmethod
    def train_step(self, batch: Batch) -> float:
        """One optimizer step on the batch; returns the loss (mean over the batch)."""

    @abstractmethod
    def predict(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """Inference mode: (log-probs float32 (batch, frames, symbols), output lengths int32 (batch,))."""

    @abstractmethod
    def save_checkpoint(self, path: Path) -> None:
        """Write model and optimizer state to ``path`` (the harness makes the write atomic)."""

    @abstractmethod
    def load_checkpoint(self, path: Path) -> None:
        """Restore what ``save_checkpoint`` wrote."""

    @abstractmethod
    def parameter_count(self) -> int:
        """Trainable parameters of the built model."""

    def device_description(self) -> str:
        """Human-readable description of the devices in use (for the log and the report)."""
        return ""


@dataclass(frozen=True)
class BackendReference:
    """A backend registered by name and import path, imported only when a run asks for it.

    Frameworks take seconds to import and some log to stderr when they do; registering a
    reference keeps `benchbase plugins`, `benchbase check` and every error path fast and quiet.
    """

    name: str
    target: str
    """"module:ClassName" of the Backend subclass."""
    description: str = ""

    def load(self) -> type[Backend]:
        module_name, _, class_name = self.target.partition(":")
        backend = getattr(importlib.import_module(module_name), class_name)
        if not (isinstance(backend, type) and issubclass(backend, Backend)):
            raise TypeError(f"{self.target} is not a benchbase Backend subclass")
        return backend

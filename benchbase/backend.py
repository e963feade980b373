"""The contract between the harness and a backend (contract version 3).

A backend builds the model, runs training steps and predicts: what ``predict()`` returns is
its model family's choice (per-frame log-probabilities for a CTC family such as ds2, the joint
network's encoder projection for the rnnt transducer; ``benchbase.families.parts``).
Everything that decides the score (the clock, the data order, decoding, metrics, the TTA rule,
the compliance log) stays in the harness. Every rule an implementer must follow is here; the
kit (`benchbase backend-test NAME`) proves them, docs/writing-a-backend.md builds one step by step.

The call order, whatever the backend:

    backend = BackendClass()            # init, off the clock: no framework work yet
    backend.build(context)              # the run clock is already running (compilation is timed)
    backend.warm_up(shapes)?            # compilation before run_start, where the TTA rule allows
    backend.load_checkpoint(path)?      # only right after build(), before any train_step()
    backend.train_step(batch) ...       # interleaved with predict() and save_checkpoint()
    backend.predict(inputs) ...
    backend.save_checkpoint(path) ...
    backend.close()                     # exactly once, also when build() or a step raised

A run whose ``ModelSpec.precision`` is not fp32 ends with one more instance, off the clock,
while the first is still open (before its close()): the final evaluation's FP32 twin, built
with the same context at ``precision="fp32"``, given the first one's ``export_weights()``
(less the quantizer's ranges) through ``import_weights()``, evaluated with ``predict()`` and
closed (every backend implements fp32). Under a strategy other than sync (learners whose
weights differ), rank 0 evaluates and exports its own learner's; every rank checkpoints its own.

Contract versions (the log records the one a run used, ``benchbase_backend_contract``):
3 (benchbase 0.2) returns log-probabilities alone from ``predict()`` and adds the optional
``warm_up()``; docs/writing-a-backend.md has the history."""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np

from benchbase.specs import ModelSpec, OptimizerSpec
from benchbase.specs.result import STEP_STAGES
from benchbase.specs.strategy import StrategySpec, SyncSpec

__all__ = ["CONTRACT_VERSION", "STEP_STAGES", "Backend", "BackendReference", "Batch", "BatchShape", "BuildContext",
           "Capabilities", "DevicePlan", "Inputs"]

CONTRACT_VERSION = 3

DeviceKind = Literal["cpu", "cuda"]
ProcessModel = Literal["single_process", "process_per_device", "process_per_machine"]


@dataclass(frozen=True)
class Inputs:
    """What ``predict()`` sees: features and lengths, never labels or transcripts.

    Shape guarantees (the same for a training ``Batch``):

    - ``features`` is float32, C-contiguous, (batch, frames, feature_dimension), normalized
      with the training split's statistics and right-padded with zeros. ``frames`` is the
      longest utterance of the batch, or the workload's ``data.pad_to_frames`` when it pins
      one, and never more than ``BuildContext.max_frames``.
    - ``feature_lengths`` is int32 (batch,): valid frames of each utterance, at least the
      convolution width (shorter utterances never reach a backend).
    - ``output_lengths`` is int32 (batch,): valid output frames of each utterance,
      ``ModelSpec.output_frames(feature_lengths)``. The harness owns this formula; a backend
      uses these lengths for CTC instead of computing its own.
    - The batch size varies: the last dev batch may be smaller than the others. Training
      batches always hold the global batch (the last partial one is dropped).
    """

    features: np.ndarray
    feature_lengths: np.ndarray
    output_lengths: np.ndarray

    @property
    def size(self) -> int:
        return int(self.features.shape[0])


@dataclass(frozen=True, kw_only=True)
class Batch(Inputs):
    """A training batch: ``Inputs`` plus what the loss needs.

    - ``labels`` is int32 (batch, longest label), right-padded with the blank index; label
      values are in [0, symbols) and never the blank inside ``label_lengths``.
    - ``label_lengths`` is int32 (batch,), at least 1 and never more than
      ``BuildContext.max_label_length``.
    - With a workload's ``augmentation``, the harness has SpecAugment-masked ``features``: draw no masks.
    """

    labels: np.ndarray
    label_lengths: np.ndarray
    utterance_ids: tuple[str, ...]
    """For the harness's own logs; a backend has no use for them."""
    transcripts: tuple[str, ...]
    """For the harness's own logs; a backend has no use for them."""

    def inputs(self) -> Inputs:
        """The same batch as ``predict()`` may see it: a new object without labels."""
        return Inputs(self.features, self.feature_lengths, self.output_lengths)


@dataclass(frozen=True)
class BatchShape:
    """One batch's shape (rows, ``features``' frames, longest label): what ``warm_up()`` compiles for."""

    rows: int
    frames: int
    label_length: int


@dataclass(frozen=True)
class DevicePlan:
    """Where and how wide a backend trains, resolved from the hardware profile.

    - ``kind`` "cpu" or "cuda"; ``count`` devices of that kind in the whole run. The global
      batch is split into ``count`` equal, contiguous slices of ``batch_per_device`` rows,
      slice i for device i, and the devices' gradients are averaged (synchronous
      data-parallel SGD), so one step on ``count`` devices is one step on the global batch:
      BatchNorm's statistics are the global batch's (all-reduced across devices), as are the
      loss and the gradient.
    - A backend trains on exactly the devices the plan names: never fewer (a profile naming
      four GPUs is not trained on one), and never silently more. A backend that cannot span
      ``count`` devices says so in its ``Capabilities`` and the harness refuses the run
      before the clock starts.
    - ``world_size`` processes train together, this one being ``rank`` (``local_rank`` on
      its machine), each on ``devices_per_process`` of the devices; its ``train_step``
      receives only its own slice of the global batch (``batch_per_device *
      devices_per_process`` rows: the slices of its devices, in order). A ``single_process``
      backend always sees a world of one and drives all ``count`` devices itself. A
      ``process_per_device`` backend runs in ``count`` processes (torch's launcher starts them,
      or ``torchrun``); the default process group of torch.distributed is initialized before
      ``build()`` (gloo on CPUs, NCCL on GPUs) and each process trains on device
      ``local_rank``. A ``process_per_machine`` backend runs alone on one machine, or in one
      process per machine under ``torchrun --nproc-per-node 1``, each driving its machine's
      ``devices_per_process`` devices; ``peer_addresses`` then holds one free "host:port" per
      rank, reserved for the framework's own cluster (tf.distribute's TF_CONFIG).
    - ``threads`` is this process's thread budget: at most this many CPU threads may compute
      at once (intra-op and inter-op pools, XLA's and BLAS's included). None: the
      framework's default. The harness measures the process's CPU time during
      ``train_step()`` against the wall time; result.json records the cores used and
      `benchbase check` flags a run over its budget.
    - ``overridden``: the device count is the user's ``--devices``, not the profile's; the
      log says so.
    """

    kind: DeviceKind
    count: int
    batch_per_device: int
    threads: int | None = None
    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    overridden: bool = False
    devices_per_process: int | None = None
    """None: ``count`` (a world of one)."""
    peer_addresses: tuple[str, ...] = ()
    cuda_graphs: bool = True  # the profile's devices.cuda_graphs: a backend may replay CUDA steps from graphs

    @property
    def process_devices(self) -> int:
        """The devices this process trains on."""
        return self.count if self.devices_per_process is None else self.devices_per_process

    @property
    def distributed(self) -> bool:
        """More than one process trains: the backend wraps its model for torch.distributed."""
        return self.world_size > 1


@dataclass(frozen=True)
class BuildContext:
    """Everything ``build()`` receives.

    ``max_frames`` and ``max_label_length`` bound every batch of the run (training and
    evaluation): the data's true maxima over its training and dev splits (``max_frames`` is
    ``data.pad_to_frames`` where the workload pins one), so padding to them costs no more than
    the longest batch does."""

    model: ModelSpec
    optimizer: OptimizerSpec
    feature_dimension: int
    plan: DevicePlan
    seed: int
    max_frames: int
    max_label_length: int
    strategy: StrategySpec = field(default_factory=SyncSpec)  # sync, or one ``Capabilities.strategies`` names


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; the harness checks the run against it before the clock starts."""

    families: frozenset[str] = frozenset({"ds2"})
    """Model families it implements (``ModelSpec.family``; ``benchbase.specs.model.model_families()``).
    A run of a workload of another family is refused before the clock starts."""
    optimizers: frozenset[str] = frozenset({"adadelta"})
    """Optimizers it implements (``OptimizerSpec.name``), every field and ``learning_rate_at``'s schedule."""
    devices: frozenset[DeviceKind] = frozenset({"cpu"})
    max_devices: int = 1
    """Most devices of one kind the backend spans in one run."""
    precisions: frozenset[str] = frozenset({"fp32"})
    """Arithmetic precisions it implements (``ModelSpec.precision``, ``benchbase.specs.model.PRECISIONS``).

    fp32 is required (the final evaluation's FP32 twin uses it). What each other one means is
    pinned in ``ModelSpec.precision``'s description: tf32 and fp16 exist on GPUs only (the
    harness refuses them on a CPU plan before the clock starts, whatever a backend declares);
    bf16 and fp16 are the framework's automatic mixed precision (float32 master weights, fp16
    with dynamic loss scaling); int8-emulated fake-quantizes exactly as ``ModelSpec.quantization``
    says (``benchbase.numerics.quantization``), keeps its activation ranges as model state (in the
    weight layout and the checkpoint, like BatchNorm's statistics), and evaluates quantized too.
    ``predict`` returns float32 outputs, ``export_weights`` float32 master weights."""
    family_precisions: tuple[tuple[str, frozenset[str]], ...] = ()
    """(family, its precisions) where a family has fewer than ``precisions``: ``(("rnnt", frozenset({"fp32"})),)``."""
    strategies: frozenset[str] = frozenset({"sync"})  # training strategies (benchbase.specs.strategy)
    process_model: ProcessModel = "single_process"
    """single_process: one process drives every device (tf.distribute's MirroredStrategy).
    process_per_device: one process per device under torch.distributed, started by torch's
    launcher (``benchbase run`` starts it itself, or the user runs ``torchrun``).
    process_per_machine: one process drives its machine's devices; across machines, one
    process per machine under ``torchrun`` (tf.distribute's MultiWorkerMirroredStrategy)."""

    def precisions_of(self, family: str) -> frozenset[str]:
        """The precisions the backend implements for ``family``."""
        return dict(self.family_precisions).get(family, self.precisions)


class Backend(ABC):
    """Base class of every backend: a subclass implements every abstract method.

    The semantics a backend must implement are pinned in ``ModelSpec`` and ``OptimizerSpec``
    (each field's description says what it means where frameworks differ): BatchNorm over
    every frame of the padded batch with the biased variance (``batchnorm_frames``,
    ``batchnorm_variance``), CTC's zero loss for impossible alignments
    (``ctc_impossible_alignments``), Xavier-uniform weights over each whole matrix,
    the forget-gate bias, inverted dropout in training only, the AdaDelta settings.
    The conformance kit compares a backend's forward pass, loss and BatchNorm statistics
    with benchbase's own NumPy reference on the same weights.

    The harness constructs a backend with no arguments during init, off the clock: a
    constructor must not start framework work (device selection, compilation) that belongs
    to ``build()``.
    """

    name: ClassVar[str]
    """Name users pass to ``--backend``."""
    description: ClassVar[str] = ""
    capabilities: ClassVar[Capabilities] = Capabilities()

    @abstractmethod
    def build(self, context: BuildContext) -> None:
        """Create the model and the optimizer on the plan's devices, seeded by ``context.seed``.

        The run clock starts just before this call, as in the paper: building, tracing and
        compiling are timed. Initialize every weight as ``context.model`` pins it; the same
        seed must give the same weights and the same first losses.
        """

    @abstractmethod
    def train_step(self, batch: Batch) -> float:
        """One optimizer step on the global batch; returns its loss as a Python ``float``.

        A process-per-device backend in a world of several processes receives only its own
        slice of the global batch and returns the loss of the whole global batch (reduced
        across processes), the same number on every rank.

        The loss is the CTC negative log-likelihood of each utterance summed over its frames,
        averaged over the batch (``ModelSpec.ctc_reduction``), computed before the update.
        Return only when the update is complete: asynchronous frameworks block on it.
        """

    @abstractmethod
    def predict(self, inputs: Inputs) -> np.ndarray:
        """Inference mode (no dropout, BatchNorm's running statistics), no update.

        Returns the log-probabilities: float32 numpy (batch, frames, symbols), log-softmax over
        symbols, frames at least ``max(inputs.output_lengths)``. Frames past an utterance's
        length (``inputs.output_lengths``, the harness's) are ignored. Must not change any
        state a later call sees.
        """

    @abstractmethod
    def save_checkpoint(self, path: Path) -> None:
        """Write to exactly ``path`` everything needed to continue training exactly.

        That is the weights, BatchNorm's running statistics, the optimizer's state and the
        backend's own random state (dropout). The harness writes to a temporary name and
        renames it, so the write is atomic; it keeps the files and decides when to write. Every
        rank of a multi-process run saves its own learner at the same batch, to its own path
        (rank 0 alone at the final checkpoint), so it must not communicate.
        """

    @abstractmethod
    def load_checkpoint(self, path: Path) -> None:
        """Restore what ``save_checkpoint`` of the same backend wrote, right after ``build()`` with the
        same context, before any step; a file that does not fit raises ``BenchbaseError`` naming it."""

    def host_array(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
        """A host array the harness's training pipeline pads a batch's features into, in its producer
        threads (so thread-safe), after ``build()``: memory the backend copies to its device fastest
        (page-locked for a GPU, which only a framework can allocate). None (the default): NumPy's."""
        return None

    @abstractmethod
    def parameter_count(self) -> int:
        """Trainable parameters of the built model: ``ModelSpec.parameter_count`` must agree."""

    @abstractmethod
    def export_weights(self) -> dict[str, np.ndarray]:
        """The model's weights in benchbase's framework-neutral layout: the names, shapes and meanings of
        ``family_parts(model).weight_layout(model, feature_dimension)``, float32 NumPy copies, BatchNorm's
        running statistics included."""

    @abstractmethod
    def import_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Set the model's weights from the framework-neutral layout (every name, exact shapes), the
        optimizer's state left as it is: the conformance kit compares the backend with the reference so."""

    @classmethod
    def visible_devices(cls, kind: DeviceKind) -> int | None:
        """How many devices of ``kind`` this machine offers the backend (``CUDA_VISIBLE_DEVICES``
        respected); None when any number can be had (CPU devices are the backend's to split).
        Asked before the clock, so that a plan the machine cannot satisfy (``--hw sys1`` on one
        GPU) is refused in one line instead of failing in ``build()``. The default knows no GPU."""
        return None if kind == "cpu" else 0

    def warm_up(self, shapes: Sequence[BatchShape]) -> None:  # noqa: B027  (optional: compiles nothing)
        """Compile for ``shapes`` (every distinct shape of the run's training and evaluation batches)
        in init, right after ``build()``: called only where the workload's TTA rule says
        ``compilation: before_run_start``. Use synthetic inputs only and leave every state as
        ``build()`` made it (the harness checks the weights, the conformance kit the losses)."""

    def devices_in_use(self) -> tuple[str, ...]:
        """The devices this process trains on, one string each (e.g. "cuda:0 NVIDIA H100").

        The harness checks them against the plan after ``build()``: as many as the plan gives
        this process (``count`` for a single-process backend, one per process otherwise).
        """
        return ()

    def device_description(self) -> str:
        return ", ".join(self.devices_in_use())  # for the log and the report

    def step_timings(self) -> Mapping[str, float]:
        """Where the last ``train_step`` spent its time, as the backend measures it: "communication"
        (seconds of a DDP hook's all-reduce), "communication_bytes" (this learner's payload), any
        other number under "backend" (a CUDA graph's capture). The harness writes them per batch
        beside its data-wait and step times. Empty (the default): nothing measured. Optionally the
        step's phases (``STEP_STAGES``), seconds each, timed without changing the step (plain timers
        on a CPU; CUDA events read after the step's own synchronization on a GPU); a compiled step
        reports what it can tell apart, the rest counts as "step", none at all as "not reported"."""
        return {}

    def start_profiler(self, directory: Path) -> None:
        """Start the framework's own profiler (torch.profiler, tf.profiler) writing into ``directory``.
        ``benchbase run --profile-steps STEPS`` calls this before a few training steps and
        ``stop_profiler()`` after; a backend without both is refused ``--profile-steps``."""
        raise NotImplementedError

    def stop_profiler(self) -> None:
        """Stop the profiler started by ``start_profiler`` and write its trace."""
        raise NotImplementedError

    def close(self) -> None:  # noqa: B027  (optional: a backend with nothing to release keeps it)
        """Release the framework's resources (device memory, thread pools, compiled caches).

        Called exactly once at the end of the run, also when ``build()`` raised or never ran
        (a ``run_started`` hook raised first); ``--runs N`` builds N backends in one process,
        so nothing the backend allocated may outlive this call. Process-wide framework
        settings that cannot be undone (thread-pool sizes) may stay.
        """


@dataclass(frozen=True)
class BackendReference:
    """A backend registered by name and import path, imported only when a run asks for it:
    frameworks take seconds to import, and `benchbase plugins` and `check` stay fast and quiet."""

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

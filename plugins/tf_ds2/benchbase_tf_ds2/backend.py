"""The TensorFlow backend: builds the model family's Keras model, runs its optimizer's steps, and
returns what the family's ``predict`` returns (DS2: per-frame log-probabilities; RNN-T: the
joint's encoder projection).

Each model family is a folder (such as ``ds2/`` and ``rnnt/``) whose ``FAMILY`` meets
``family.ModelFamily``: its model, its utterances' losses, its predictions and its neutral
weights. ``build()`` picks the spec's once, and everything here is the same for every family.

Training is data-parallel through tf.distribute. In one process (a plain ``benchbase run``), a
MirroredStrategy has one replica per device the plan names, GPUs or logical CPU devices (a CPU
plan of ``count`` devices splits the host CPU into ``count`` logical devices before TensorFlow
starts, so it must be the process's first TensorFlow work). Across machines, ``torchrun
--nproc-per-node 1`` starts one process per machine (the backend's process model is
``process_per_machine``), and each is a worker of a MultiWorkerMirroredStrategy whose cluster
is the plan's ``peer_addresses``: one replica per GPU the plan gives the process, or its one
host CPU (a CPU worker cannot be split into logical devices), all-reduced by NCCL on GPUs and
by TensorFlow's gRPC ring on CPUs. The harness's own torch.distributed group is a separate
channel; TensorFlow's collectives never use it.

``train_step`` receives this process's rows of the global batch (all of them in one process)
and cuts them on the host into one contiguous slice per local replica; slice i is the i-th
local replica's input, so each device receives only its own rows, and replicas are numbered
worker by worker in the global batch's order. The replicas' losses and gradients add up to the
global batch's (every worker returns the whole batch's loss), BatchNorm's statistics and
int8-emulated's ranges are all-reduced across every replica of every worker
(benchbase_tf_ds2.cross_replica), and every replica's copy of the model stays identical to the
others and, rounding aside, to one device's trained on the whole batch. ``predict`` and
``save_checkpoint`` read this process's own copy and never communicate, so rank 0 calls them
alone.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

# TensorFlow's C++ INFO lines (oneDNN notices, CPU feature flags) would land in the middle of
# the reporter's live view; warnings and errors still show. A user's own setting wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import keras
import numpy as np
import tensorflow as tf

import benchbase_tf_ds2
from benchbase.backend import Backend, Batch, BatchShape, BuildContext, Capabilities, DeviceKind, DevicePlan, Inputs
from benchbase.errors import BenchbaseError
from benchbase.families.folders import discover
from benchbase_tf_ds2.devices import check_gpus, logical_cpus
from benchbase_tf_ds2.family import ModelFamily
from benchbase_tf_ds2.optimizers import keras_optimizer, schedule_learning_rate

__all__ = ["TensorFlowBackend"]

_PEER_ERRORS = (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError)
"""What a cross-worker collective raises when another worker ends or cannot be reached."""

FAMILIES = discover(benchbase_tf_ds2, "tf", ModelFamily)
"""The model families this package's folders hold: what the capabilities and the description name."""


class TensorFlowBackend(Backend):
    name = "tf"
    description = f"TensorFlow {tf.__version__} + Keras {keras.__version__}: {FAMILIES.summaries()}"
    capabilities = Capabilities(families=frozenset(FAMILIES), optimizers=frozenset({"adadelta", "adamw"}),
                                devices=frozenset({"cpu", "cuda"}), max_devices=8,
                                precisions=FAMILIES.all_precisions(),
                                family_precisions=FAMILIES.narrower_precisions(),
                                process_model="process_per_machine")

    def __init__(self, *, fused_lstm: bool | None = None) -> None:
        """``fused_lstm`` exists for benchmarks/backend_parity.py; a run takes the default.

        None leaves the LSTM kernel to the model family (DS2 fuses on a CPU and takes Keras's
        cuDNN path on GPUs, RNN-T runs Keras's LSTM everywhere: each family's ``build_model`` says
        why); False forces Keras's own LSTM (a tf.while_loop on a CPU) to measure what fusing gains.
        """
        self.fused_lstm = fused_lstm

    @classmethod
    def visible_devices(cls, kind: DeviceKind) -> int | None:
        if kind == "cuda":
            # Listing physical devices does not start TensorFlow's runtime: the CPU can still be split.
            return len(tf.config.list_physical_devices("GPU"))
        # One process splits its CPU into as many logical devices as the plan names; a worker of
        # a cluster (torchrun started several processes) has its host CPU alone, so a plan giving
        # it more is refused before the clock starts.
        return 1 if _launched_as_one_of_several() else None

    def build(self, context: BuildContext) -> None:
        self.family = FAMILIES.for_model(context.model)
        _configure_threads(context.plan.threads)
        # The spec's fp32 is IEEE float32; TensorFlow would use TF32 matmuls on Ampere and later.
        # Only tf32 allows them (the float32 parts of bf16, fp16 and int8-emulated are IEEE too).
        tf.config.experimental.enable_tensor_float_32_execution(context.model.precision == "tf32")
        keras.utils.set_random_seed(context.seed)
        self.context = context
        self.spec = context.model
        self.optimizer_spec = context.optimizer
        self.strategy = _strategy(context.plan)
        with self.strategy.scope():
            self.model = self.family.build_model(context, self.fused_lstm)
            self.optimizer = keras_optimizer(context.optimizer)
            if context.model.precision == "fp16":
                # fp16's dynamic loss scaling, with Keras's defaults (2**15, halved and the step
                # skipped on an overflow, doubled after 2000 finite steps).
                self.optimizer = keras.optimizers.LossScaleOptimizer(self.optimizer)
            self.optimizer.build(self.model.trainable_variables)
        self._train_function = self._compile_train_step(context.feature_dimension)
        self._predict_function = tf.function(
            lambda features, feature_lengths: self.family.forward(self.model, features, feature_lengths),
            input_signature=[tf.TensorSpec([None, None, context.feature_dimension], tf.float32),
                             tf.TensorSpec([None], tf.int32)],
        )

    def train_step(self, batch: Batch) -> float:
        replicas = self._local_replicas()
        if batch.size % replicas:
            raise BenchbaseError(f"a batch of {batch.size} does not split evenly over {replicas} devices")
        arrays = (batch.features, batch.feature_lengths, batch.output_lengths, batch.labels, batch.label_lengths)
        slices = [_replica_slices(array, replicas) for array in arrays]
        schedule_learning_rate(self.optimizer, self.optimizer_spec)
        try:
            loss = self._train_function(*slices)
            return float(loss)  # .numpy() waits for the step: the update is complete
        except _PEER_ERRORS as error:
            if not self.context.plan.distributed:
                raise
            # The harness names the rank that failed; this rank's part is one line, not TensorFlow's
            # graph traceback.
            raise BenchbaseError(f"another worker of the run is gone: TensorFlow's all-reduce failed "
                                 f"({_status_line(error)})") from None

    def warm_up(self, shapes: Sequence[BatchShape]) -> None:
        """Trace the training step and predict() before the clock, where the workload allows it.
        Their signatures leave batch, frames and labels open, so one trace each serves every
        shape; tracing executes nothing, so no variable changes."""
        self._train_function.get_concrete_function()
        self._predict_function.get_concrete_function()

    def predict(self, inputs: Inputs) -> np.ndarray:
        return self.family.predict(self._predict_function, self.spec, inputs)

    def save_checkpoint(self, path: Path) -> None:
        arrays = {f"{group}/{index:04d}": variable.numpy()
                  for group, variables in self._checkpointed().items() for index, variable in enumerate(variables)}
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        # Exactly the path given (np.savez would append .npz to a name): the harness renames it.
        Path(path).write_bytes(buffer.getvalue())

    def load_checkpoint(self, path: Path) -> None:
        try:
            saved = np.load(Path(path), allow_pickle=False)
        except (OSError, ValueError, EOFError) as error:
            raise BenchbaseError(f"{path}: not a checkpoint of this model ({error})") from None
        with saved:
            for group, variables in self._checkpointed().items():
                _restore(variables, saved, group, path)

    def _checkpointed(self) -> dict[str, list]:
        """Variables by position: Keras numbers its names per process, the build order is fixed.

        The model's variables include BatchNorm's running statistics and dropout's seed state.
        """
        return {"model": self.model.variables, "optimizer": self.optimizer.variables}

    def parameter_count(self) -> int:
        return int(sum(math.prod(v.shape) for v in self.model.trainable_variables))

    def export_weights(self) -> dict[str, np.ndarray]:
        # Copies: a caller may keep them while training goes on.
        return {name: np.array(variable.numpy(), dtype=np.float32)
                for name, variable in self.family.neutral_variables(self.model).items()}

    def import_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        self.family.layout.validate_weights(weights, self.spec, self.context.feature_dimension)
        for name, variable in self.family.neutral_variables(self.model).items():
            variable.assign(np.asarray(weights[name], dtype=np.float32))

    def devices_in_use(self) -> tuple[str, ...]:
        """This process's devices (its worker's, under MultiWorkerMirroredStrategy)."""
        return tuple(self.strategy.extended.worker_devices)

    def device_description(self) -> str:
        devices = ", ".join(self.devices_in_use())
        threads = tf.config.threading.get_intra_op_parallelism_threads() or "default"
        plan = self.context.plan
        worker = f" (worker {plan.rank} of {plan.world_size})" if plan.distributed else ""
        return f"tf.distribute {type(self.strategy).__name__} over {devices}{worker}; intra-op threads {threads}"

    def _local_replicas(self) -> int:
        """The replicas this process runs: all of them in one process, its worker's under several."""
        return len(self.strategy.extended.worker_devices)

    def start_profiler(self, directory: Path) -> None:
        tf.profiler.experimental.start(str(directory))

    def stop_profiler(self) -> None:
        tf.profiler.experimental.stop()

    def close(self) -> None:
        for attribute in ("model", "optimizer", "strategy", "_train_function", "_predict_function"):
            self.__dict__.pop(attribute, None)
        keras.backend.clear_session()

    # --- the compiled step --------------------------------------------------------------

    def _compile_train_step(self, feature_dimension: int):
        # Each input is a list with one slice per local replica, so that each slice is a separate
        # argument of the compiled step: only replica i's operations read slice i, and only
        # those rows are copied to its device.
        replicas = self._local_replicas()
        signature = [
            [tf.TensorSpec([None, None, feature_dimension], tf.float32)] * replicas,
            [tf.TensorSpec([None], tf.int32)] * replicas,
            [tf.TensorSpec([None], tf.int32)] * replicas,
            [tf.TensorSpec([None, None], tf.int32)] * replicas,
            [tf.TensorSpec([None], tf.int32)] * replicas,
        ]

        # One trace for every batch shape: frames and label lengths vary from batch to batch.
        # No XLA: neither the sparse CTCLoss op nor BlockLSTM has an XLA kernel, and XLA would
        # compile anew for every distinct frame count (docs/BENCHMARKS.md has the numbers).
        @tf.function(input_signature=signature)
        def train(*slices):
            per_replica_inputs = self.strategy.experimental_distribute_values_from_function(
                lambda value_context: tuple(inputs[_local_index(value_context, replicas)] for inputs in slices))
            per_replica = self.strategy.run(self._replica_step, args=per_replica_inputs)
            # Across every replica of every worker: each rank returns the whole global batch's loss.
            return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        return train

    def _replica_step(self, features, feature_lengths, output_lengths, labels, label_lengths):
        """One replica's step on its slice of the global batch; returns its part of the batch-mean loss."""
        context = tf.distribute.get_replica_context()
        # num_replicas_in_sync counts every worker's replicas; the slices are equal.
        global_size = tf.shape(features)[0] * context.num_replicas_in_sync
        with tf.GradientTape() as tape:
            # Summed over this replica's utterances, divided by the global batch: the replicas'
            # losses and gradients add up (all-reduce SUM) to those of the batch mean.
            losses = self.family.utterance_losses(self.model, features, feature_lengths, output_lengths, labels,
                                                  label_lengths)
            loss = tf.reduce_sum(losses) / tf.cast(global_size, tf.float32)
            scaled = self.optimizer.scale_loss(loss)  # fp16's loss scale; the loss itself otherwise
        variables = self.model.trainable_variables
        gradients = self._clipped(tape.gradient(scaled, variables), context)
        self.optimizer.apply(gradients, variables)  # the LossScaleOptimizer unscales and checks them
        return loss

    def _clipped(self, gradients, context):
        clip = self.optimizer_spec.gradient_clip_norm
        if not clip:
            return gradients
        # The norm is the global batch's: sum the replicas' gradients first, clip, then hand each
        # replica its share back, since the Keras optimizer all-reduces (sums) them once more.
        replicas = context.num_replicas_in_sync
        if replicas > 1:
            gradients = context.all_reduce(tf.distribute.ReduceOp.SUM, gradients)
        # fp16: the norm is the true gradient's, so clip unscaled and scale back for the
        # LossScaleOptimizer (an overflow stays non-finite, and that step is skipped).
        scale = self.optimizer.scale_loss(tf.constant(1.0))
        gradients, _ = tf.clip_by_global_norm([gradient / scale for gradient in gradients], clip)
        gradients = [gradient * scale for gradient in gradients]
        return [gradient / replicas for gradient in gradients] if replicas > 1 else gradients


def _status_line(error: tf.errors.OpError) -> str:
    """The failed operation's own status, without the traceback of where the graph defined it."""
    lines = [line for line in error.message.splitlines()
             if line.strip() and not line.startswith((" ", "\t", "Graph execution error", "Detected at node"))]
    return (lines[0] if lines else type(error).__name__)[:300]


def _local_index(value_context: tf.distribute.experimental.ValueContext, local_replicas: int) -> int:
    """Which of this process's slices a replica takes.

    Replicas are numbered worker by worker (worker w's local replica i is w * local_replicas + i),
    and this process's rows are already its worker's part of the global batch.
    """
    return value_context.replica_id_in_sync_group % local_replicas


def _replica_slices(array: np.ndarray, replicas: int) -> list[np.ndarray]:
    """The plan's split: ``replicas`` equal runs of contiguous rows, slice i for replica i (views, no copy)."""
    rows = len(array) // replicas
    return [array[index * rows : (index + 1) * rows] for index in range(replicas)]


def _restore(variables, saved, group: str, path: Path) -> None:
    stored = sorted(key for key in saved.files if key.startswith(group + "/"))
    shapes = [tuple(saved[key].shape) for key in stored]
    if shapes != [tuple(variable.shape) for variable in variables]:
        raise BenchbaseError(f"{path}: its {group} variables do not fit this model; was it written for another one?")
    for key, variable in zip(stored, variables):
        variable.assign(saved[key])


def _configure_threads(threads: int | None) -> None:
    if not threads:
        return
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:
        # TensorFlow fixes its thread pools at its first op; a second backend in the same
        # process (tests, benchmarks/backend_parity.py) keeps the first one's setting.
        pass


def _launched_as_one_of_several() -> bool:
    """torchrun's WORLD_SIZE, read before the harness hands over a plan (visible_devices has none)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False  # the harness refuses a malformed torchrun environment with its own message


def _strategy(plan: DevicePlan) -> tf.distribute.Strategy:
    return _multi_worker_strategy(plan) if plan.distributed else _one_process_strategy(plan)


def _one_process_strategy(plan: DevicePlan) -> tf.distribute.MirroredStrategy:
    if plan.kind == "cpu":
        # Not TensorFlow's default (collective ops): every MirroredStrategy numbers its
        # collectives from the same keys, and the process remembers each key's tensor shape, so a
        # later strategy in the same process whose model differs (another precision, another
        # test) fails on its first all-reduce. Logical CPUs share the host's memory anyway: a sum
        # on the first device and a broadcast cost no more than a ring.
        return tf.distribute.MirroredStrategy(logical_cpus(plan.count),
                                              cross_device_ops=tf.distribute.ReductionToOneDevice())
    check_gpus(plan.count)
    # TensorFlow's default on GPUs, NCCL collectives, with the same shared numbering: one process
    # trains one model on several GPUs (the harness's --runs repeat the same model, whose
    # collectives have the same shapes).
    return tf.distribute.MirroredStrategy([f"/gpu:{index}" for index in range(plan.count)])


def _multi_worker_strategy(plan: DevicePlan) -> tf.distribute.MultiWorkerMirroredStrategy:
    """One worker per process of the run, this one driving its ``process_devices`` devices.

    It starts this worker's gRPC server and enables collective ops, which TensorFlow wants done
    before its runtime starts (afterwards it warns that tensors created earlier may break): the
    harness does no TensorFlow work before build(), and build() none before this. A second
    build in the same process (``--runs N``) enables them again on the same cluster, with that
    warning and nothing else.
    """
    if plan.kind == "cpu" and plan.process_devices > 1:
        # MultiWorkerMirroredStrategy gives a CPU worker exactly one replica, its host CPU.
        raise BenchbaseError(
            f"TensorFlow's MultiWorkerMirroredStrategy trains one replica per CPU worker, and this plan gives each "
            f"of its {plan.world_size} processes {plan.process_devices} CPU devices; pass --devices "
            f"{plan.world_size} (one per machine)")
    if plan.kind == "cuda":
        check_gpus(plan.process_devices)
    # RING on CPUs: TensorFlow's own all-reduce over the workers' gRPC connections, the only one
    # for CPU tensors (NCCL is GPU-only). NCCL on GPUs, named rather than left to AUTO, so that a
    # GPU cluster's gradients take NVIDIA's all-reduce over NVLink and InfiniBand instead of a
    # ring through the hosts' memory; TensorFlow still broadcasts the initial weights by ring.
    implementation = (tf.distribute.experimental.CommunicationImplementation.NCCL if plan.kind == "cuda" else
                      tf.distribute.experimental.CommunicationImplementation.RING)
    return tf.distribute.MultiWorkerMirroredStrategy(
        cluster_resolver=_cluster_resolver(plan),
        communication_options=tf.distribute.experimental.CommunicationOptions(implementation=implementation))


def _cluster_resolver(plan: DevicePlan) -> tf.distribute.cluster_resolver.ClusterResolver:
    """The run's workers at the addresses the harness reserved, one per rank, and this process's devices.

    The same cluster TF_CONFIG would describe, given to the strategy directly: TF_CONFIG's
    resolver makes a worker take every GPU it sees, where the plan names how many it trains on
    (the first ``process_devices``), and the process's environment stays as it was.
    """
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({"worker": list(plan.peer_addresses)}), task_type="worker", task_id=plan.rank,
        num_accelerators={"GPU": plan.process_devices} if plan.kind == "cuda" else {}, rpc_layer="grpc")

"""The TensorFlow backend: builds the model, runs AdaDelta steps with CTC, returns log-probs.

Training is data-parallel through tf.distribute, in one process: a MirroredStrategy with one
replica per device the plan names, GPUs or logical CPU devices (a CPU plan of ``count`` devices
splits the host CPU into ``count`` logical devices before TensorFlow starts, so it must be the
process's first TensorFlow work). ``train_step`` receives the global batch and cuts it on the
host into ``count`` contiguous slices; slice i is replica i's input, so each device receives
only its own rows. The replicas' losses and gradients add up to the global batch's,
BatchNorm's statistics and int8-emulated's ranges are all-reduced across replicas
(benchbase_tf_ds2.cross_replica), and every replica's copy of the model stays identical to
the others and, rounding aside, to one device's trained on the whole batch.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Mapping
from pathlib import Path

# TensorFlow's C++ INFO lines (oneDNN notices, CPU feature flags) would land in the middle of
# the reporter's live view; warnings and errors still show. A user's own setting wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchbase.backend import Backend, Batch, BuildContext, Capabilities, DeviceKind, DevicePlan, Inputs
from benchbase.errors import BenchbaseError
from benchbase.weight_layout import validate_weights
from benchbase_tf_ds2.model import DeepSpeech2
from benchbase_tf_ds2.weights import neutral_variables

__all__ = ["TensorFlowBackend"]


class TensorFlowBackend(Backend):
    name = "tf"
    description = f"TensorFlow {tf.__version__} + Keras {keras.__version__}: DS2 with fused/cuDNN LSTMs, CTC, AdaDelta"
    capabilities = Capabilities(devices=frozenset({"cpu", "cuda"}), max_devices=8,
                                precisions=frozenset({"fp32", "tf32", "bf16", "fp16", "int8-emulated"}))

    def __init__(self, *, fused_lstm: bool | None = None) -> None:
        """``fused_lstm`` exists for benchmarks/backend_parity.py; a run takes the default.

        None picks TensorFlow's fused LSTM kernel on a CPU and Keras's cuDNN path on GPUs;
        False forces Keras's own LSTM (a tf.while_loop on a CPU) to measure what fusing gains.
        """
        self.fused_lstm = fused_lstm

    @classmethod
    def visible_devices(cls, kind: DeviceKind) -> int | None:
        # Listing physical devices does not start TensorFlow's runtime: the CPU can still be split.
        return None if kind == "cpu" else len(tf.config.list_physical_devices("GPU"))

    def build(self, context: BuildContext) -> None:
        _configure_threads(context.plan.threads)
        # The spec's fp32 is IEEE float32; TensorFlow would use TF32 matmuls on Ampere and later.
        # Only tf32 allows them (the float32 parts of bf16, fp16 and int8-emulated are IEEE too).
        tf.config.experimental.enable_tensor_float_32_execution(context.model.precision == "tf32")
        keras.utils.set_random_seed(context.seed)
        self.context = context
        self.spec = context.model
        self.optimizer_spec = context.optimizer
        self.strategy = _strategy(context.plan)
        fused = context.plan.kind == "cpu" if self.fused_lstm is None else self.fused_lstm
        optimizer = context.optimizer
        with self.strategy.scope():
            self.model = DeepSpeech2(context.model, context.feature_dimension, fused_lstm=fused)
            self.model.build_weights()
            self.optimizer = keras.optimizers.Adadelta(
                learning_rate=optimizer.learning_rate, rho=optimizer.rho, epsilon=optimizer.epsilon,
            )
            if context.model.precision == "fp16":
                # fp16's dynamic loss scaling, with Keras's defaults (2**15, halved and the step
                # skipped on an overflow, doubled after 2000 finite steps).
                self.optimizer = keras.optimizers.LossScaleOptimizer(self.optimizer)
            self.optimizer.build(self.model.trainable_variables)
        self._train_function = self._compile_train_step(context.feature_dimension)
        self._predict_function = tf.function(
            lambda features: self.model(features, training=False),
            input_signature=[tf.TensorSpec([None, None, context.feature_dimension], tf.float32)],
        )

    def train_step(self, batch: Batch) -> float:
        replicas = self.strategy.num_replicas_in_sync
        if batch.size % replicas:
            raise BenchbaseError(f"a batch of {batch.size} does not split evenly over {replicas} devices")
        slices = [_replica_slices(array, replicas)
                  for array in (batch.features, batch.output_lengths, batch.labels, batch.label_lengths)]
        loss = self._train_function(*slices)
        return float(loss)  # .numpy() waits for the step: the update is complete

    def predict(self, inputs: Inputs) -> tuple[np.ndarray, np.ndarray]:
        log_probs = self._predict_function(inputs.features).numpy()
        return log_probs, np.asarray(inputs.output_lengths, dtype=np.int32)

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
        return {name: np.asarray(variable.numpy(), dtype=np.float32)
                for name, variable in neutral_variables(self.model).items()}

    def import_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        validate_weights(weights, self.spec, self.context.feature_dimension)
        for name, variable in neutral_variables(self.model).items():
            variable.assign(np.asarray(weights[name], dtype=np.float32))

    def devices_in_use(self) -> tuple[str, ...]:
        return tuple(self.strategy.extended.worker_devices)

    def device_description(self) -> str:
        devices = ", ".join(self.devices_in_use())
        threads = tf.config.threading.get_intra_op_parallelism_threads() or "default"
        return f"tf.distribute {type(self.strategy).__name__} over {devices}; intra-op threads {threads}"

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
        # Each input is a list with one slice per replica, so that each slice is a separate
        # argument of the compiled step: only replica i's operations read slice i, and only
        # those rows are copied to its device.
        replicas = self.strategy.num_replicas_in_sync
        signature = [
            [tf.TensorSpec([None, None, feature_dimension], tf.float32)] * replicas,
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
                lambda value_context: tuple(inputs[value_context.replica_id_in_sync_group] for inputs in slices))
            per_replica = self.strategy.run(self._replica_step, args=per_replica_inputs)
            return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        return train

    def _replica_step(self, features, output_lengths, labels, label_lengths):
        """One replica's step on its slice of the global batch; returns its part of the batch-mean loss."""
        context = tf.distribute.get_replica_context()
        global_size = tf.shape(features)[0] * context.num_replicas_in_sync  # the slices are equal
        with tf.GradientTape() as tape:
            # Summed over this replica's utterances, divided by the global batch: the replicas'
            # losses and gradients add up (all-reduce SUM) to those of the batch mean.
            losses = self._utterance_losses(features, output_lengths, labels, label_lengths)
            loss = tf.reduce_sum(losses) / tf.cast(global_size, tf.float32)
            scaled = self.optimizer.scale_loss(loss)  # fp16's loss scale; the loss itself otherwise
        variables = self.model.trainable_variables
        gradients = self._clipped(tape.gradient(scaled, variables), context)
        self.optimizer.apply(gradients, variables)  # the LossScaleOptimizer unscales and checks them
        return loss

    def _utterance_losses(self, features, output_lengths, labels, label_lengths):
        log_probs = tf.cast(self.model(features, training=True), tf.float32)
        # TensorFlow's CTC kernel raises on an utterance whose labels cannot fit its frames
        # (the spec's ctc_impossible_alignments: zero). Such a row gets a one-label stand-in
        # that always fits, and its loss is replaced by zero below, so it adds no gradient.
        feasible = _alignable(output_lengths, labels, label_lengths)
        fitting_lengths = tf.where(feasible, label_lengths, tf.ones_like(label_lengths))
        # Sparse labels: TensorFlow then swaps in cuDNN's CTC kernel on a GPU.
        losses = tf.nn.ctc_loss(labels=_sparse_labels(labels, fitting_lengths), logits=log_probs, label_length=None,
                                logit_length=output_lengths, logits_time_major=False,
                                blank_index=self.spec.ctc_blank_index)
        return tf.where(feasible & tf.math.is_finite(losses), losses, tf.zeros_like(losses))

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


def _replica_slices(array: np.ndarray, replicas: int) -> list[np.ndarray]:
    """The plan's split: ``replicas`` equal runs of contiguous rows, slice i for replica i (views, no copy)."""
    rows = len(array) // replicas
    return [array[index * rows : (index + 1) * rows] for index in range(replicas)]


def _alignable(output_lengths: tf.Tensor, labels: tf.Tensor, label_lengths: tf.Tensor) -> tf.Tensor:
    """Rows with a CTC alignment: a frame per label, plus a blank between each repeated pair."""
    inside = tf.sequence_mask(label_lengths - 1, tf.shape(labels)[1] - 1)
    repeats = tf.reduce_sum(tf.cast((labels[:, 1:] == labels[:, :-1]) & inside, tf.int32), axis=1)
    return output_lengths >= label_lengths + repeats


def _sparse_labels(labels: tf.Tensor, label_lengths: tf.Tensor) -> tf.SparseTensor:
    valid = tf.sequence_mask(label_lengths, tf.shape(labels)[1])
    indices = tf.where(valid)
    return tf.SparseTensor(indices, tf.gather_nd(labels, indices), tf.shape(labels, out_type=tf.int64))


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


def _strategy(plan: DevicePlan) -> tf.distribute.Strategy:
    if plan.kind == "cpu":
        # Not TensorFlow's default (collective ops): every MirroredStrategy numbers its
        # collectives from the same keys, and the process remembers each key's tensor shape, so a
        # later strategy in the same process whose model differs (another precision, another
        # test) fails on its first all-reduce. Logical CPUs share the host's memory anyway: a sum
        # on the first device and a broadcast cost no more than a ring.
        return tf.distribute.MirroredStrategy(_logical_cpus(plan.count),
                                              cross_device_ops=tf.distribute.ReductionToOneDevice())
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        raise BenchbaseError("the hardware profile asks for CUDA, but TensorFlow sees no GPU; pass --device cpu")
    if len(gpus) < plan.count:
        raise BenchbaseError(f"the hardware profile names {plan.count} GPUs, but TensorFlow sees {len(gpus)}")
    # TensorFlow's default on GPUs, NCCL collectives, with the same shared numbering: one process
    # trains one model on several GPUs (the harness's --runs repeat the same model, whose
    # collectives have the same shapes).
    return tf.distribute.MirroredStrategy([f"/gpu:{index}" for index in range(plan.count)])


def _logical_cpus(count: int) -> list[str]:
    """The first ``count`` logical CPU devices, the host CPU split into ``count`` if TensorFlow has not started.

    TensorFlow creates its devices at its first operation and never changes them afterwards.
    One device needs no split (a process that already has more uses the first). A second
    build in the same process (``--runs N``) asks for the same split again, which is allowed.
    """
    if count > 1:
        host = tf.config.list_physical_devices("CPU")[0]
        try:
            tf.config.set_logical_device_configuration(host, [tf.config.LogicalDeviceConfiguration()] * count)
        except RuntimeError:
            present = len(tf.config.list_logical_devices("CPU"))
            if present < count:
                raise BenchbaseError(
                    f"TensorFlow already fixed this process's CPU devices at {present} logical device(s) before "
                    f"the backend could split the CPU into {count}; run a {count}-device CPU plan in a fresh process"
                ) from None
    return [f"/cpu:{index}" for index in range(count)]

"""The PyTorch backend: builds the model, runs AdaDelta steps with CTC, returns log-probs."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from benchbase.backend import Backend, Batch, BuildContext, Capabilities, DevicePlan, Inputs
from benchbase.errors import BenchbaseError
from benchbase.weight_layout import validate_weights
from benchbase_torch_ds2 import weights
from benchbase_torch_ds2.model import DeepSpeech2

__all__ = ["TorchBackend"]


class TorchBackend(Backend):
    name = "torch"
    description = f"PyTorch {torch.__version__}: DS2 with cuDNN/oneDNN LSTMs, CTC, AdaDelta"
    # One device per run until DistributedDataParallel lands: the harness refuses a plan for more.
    capabilities = Capabilities(devices=frozenset({"cpu", "cuda"}), max_devices=1,
                                precisions=frozenset({"fp32", "tf32", "bf16", "fp16", "int8-emulated"}))

    def build(self, context: BuildContext) -> None:
        self.context = context
        self.device = _select_device(context.plan)
        _configure_threads(context.plan.threads)
        precision = context.model.precision
        _allow_tf32(precision == "tf32")
        # bf16 and fp16 are torch.autocast's mixed precision: float32 weights and optimizer,
        # the autocast type in the layers it lists; int8-emulated computes in true float32.
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        # fp16's dynamic loss scaling (GradScaler's defaults: 2**16, halved on an overflow and
        # the step skipped, doubled after 2000 finite steps); the other precisions need none.
        # The harness runs fp16 and tf32 on GPUs only; a CPU build (tests) still works.
        self.scaler = torch.amp.GradScaler(self.device.type) if precision == "fp16" else None
        torch.manual_seed(context.seed)
        self.spec = context.model
        self.model = DeepSpeech2(context.model, context.feature_dimension).to(self.device)
        self.model.train()
        optimizer = context.optimizer
        self.optimizer = torch.optim.Adadelta(
            [p for p in self.model.parameters() if p.requires_grad],
            lr=optimizer.learning_rate, rho=optimizer.rho, eps=optimizer.epsilon,
        )

    def train_step(self, batch: Batch) -> float:
        features = self._tensor(batch.features)
        labels = self._tensor(batch.labels)
        output_lengths = self._tensor(batch.output_lengths).long()
        label_lengths = self._tensor(batch.label_lengths).long()
        with self._autocast():
            log_probs = self.model(features)
        # mean_over_batch: each utterance's NLL summed over frames, then averaged over the batch;
        # zero_infinity is the spec's "zero" for impossible alignments. Always in float32.
        loss = torch.nn.functional.ctc_loss(
            log_probs.float().transpose(0, 1), labels, output_lengths, label_lengths,
            blank=self.spec.ctc_blank_index, reduction="sum", zero_infinity=True,
        ) / batch.size
        self.optimizer.zero_grad(set_to_none=True)
        clip = self.context.optimizer.gradient_clip_norm
        if self.scaler is None:
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
            self.optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            if clip:
                self.scaler.unscale_(self.optimizer)  # the spec's norm is of the true gradient
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
            self.scaler.step(self.optimizer)  # skipped when a gradient overflowed
            self.scaler.update()
        return float(loss.detach())  # .item() waits for the device: the update is complete

    def predict(self, inputs: Inputs) -> tuple[np.ndarray, np.ndarray]:
        features = self._tensor(inputs.features)
        self.model.eval()
        try:
            with torch.inference_mode(), self._autocast():
                log_probs = self.model(features)
        finally:
            self.model.train()
        return log_probs.float().cpu().numpy(), np.asarray(inputs.output_lengths, dtype=np.int32)

    def save_checkpoint(self, path: Path) -> None:
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "rng": torch.get_rng_state()}
        if self.device.type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        if self.scaler is not None:
            state["loss_scale"] = self.scaler.state_dict()
        with open(path, "wb") as handle:
            torch.save(state, handle)

    def load_checkpoint(self, path: Path) -> None:
        try:
            state = torch.load(path, map_location=self.device, weights_only=True)
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            if self.scaler is not None:
                self.scaler.load_state_dict(state["loss_scale"])
        except Exception as error:  # torch.load reports a garbled file as any of a dozen exception types
            reason = (str(error).splitlines() or [type(error).__name__])[0]
            raise BenchbaseError(f"{path}: not a checkpoint of this model ({reason})") from None
        torch.set_rng_state(state["rng"].cpu())
        if "cuda_rng" in state and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["cuda_rng"].cpu(), self.device)

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    def export_weights(self) -> dict[str, np.ndarray]:
        return weights.export_weights(self.model)

    def import_weights(self, neutral: Mapping[str, np.ndarray]) -> None:
        validate_weights(neutral, self.spec, self.context.feature_dimension)
        weights.import_weights(self.model, neutral)

    def devices_in_use(self) -> tuple[str, ...]:
        if self.device.type == "cuda":
            return (f"cuda:{self.device.index} {torch.cuda.get_device_name(self.device)}",)
        return (f"cpu ({torch.get_num_threads()} threads)",)

    def close(self) -> None:
        on_gpu = getattr(self, "device", None) is not None and self.device.type == "cuda"
        for attribute in ("model", "optimizer", "scaler"):
            self.__dict__.pop(attribute, None)
        if on_gpu:
            torch.cuda.empty_cache()

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array).to(self.device, non_blocking=True)

    def _autocast(self):
        """torch.autocast in the run's mixed precision (bf16, fp16); off for the others."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)


def _select_device(plan: DevicePlan) -> torch.device:
    if plan.kind == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise BenchbaseError("the hardware profile asks for CUDA, but PyTorch sees no GPU; pass --device cpu")
    return torch.device("cuda", 0)


def _configure_threads(threads: int | None) -> None:
    if not threads:
        return
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:
        pass  # fixed once PyTorch has run parallel work in this process (a second backend, a test)


def _allow_tf32(allowed: bool) -> None:
    """TF32 in matmuls and cuDNN (convolutions, RNNs) on Ampere and later only for the spec's tf32:
    fp32 is IEEE float32, and the float32 parts of bf16, fp16 and int8-emulated are too."""
    torch.backends.cuda.matmul.allow_tf32 = allowed
    torch.backends.cudnn.allow_tf32 = allowed

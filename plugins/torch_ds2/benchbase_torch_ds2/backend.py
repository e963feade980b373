"""The PyTorch backend: builds the model, runs AdaDelta steps with CTC, returns log-probs."""

from __future__ import annotations

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
    capabilities = Capabilities(devices=frozenset({"cpu", "cuda"}), max_devices=1)

    def build(self, context: BuildContext) -> None:
        self.context = context
        self.device = _select_device(context.plan)
        _configure_threads(context.plan.threads)
        _true_fp32()
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
        log_probs = self.model(features)
        # mean_over_batch: each utterance's NLL summed over frames, then averaged over the batch;
        # zero_infinity is the spec's "zero" for impossible alignments.
        loss = torch.nn.functional.ctc_loss(
            log_probs.transpose(0, 1), labels, output_lengths, label_lengths,
            blank=self.spec.ctc_blank_index, reduction="sum", zero_infinity=True,
        ) / batch.size
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clip = self.context.optimizer.gradient_clip_norm
        if clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        self.optimizer.step()
        return float(loss.detach())  # .item() waits for the device: the update is complete

    def predict(self, inputs: Inputs) -> tuple[np.ndarray, np.ndarray]:
        features = self._tensor(inputs.features)
        self.model.eval()
        try:
            with torch.inference_mode():
                log_probs = self.model(features)
        finally:
            self.model.train()
        return log_probs.float().cpu().numpy(), np.asarray(inputs.output_lengths, dtype=np.int32)

    def save_checkpoint(self, path: Path) -> None:
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "rng": torch.get_rng_state()}
        if self.device.type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        with open(path, "wb") as handle:
            torch.save(state, handle)

    def load_checkpoint(self, path: Path) -> None:
        try:
            state = torch.load(path, map_location=self.device, weights_only=True)
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
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
        for attribute in ("model", "optimizer"):
            self.__dict__.pop(attribute, None)
        if on_gpu:
            torch.cuda.empty_cache()

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array).to(self.device, non_blocking=True)


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


def _true_fp32() -> None:
    """The spec's fp32 is IEEE float32: no TF32 in matmuls or cuDNN convolutions (Ampere and later)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

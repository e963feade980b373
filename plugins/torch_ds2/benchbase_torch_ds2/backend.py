"""The PyTorch backend: builds the model, runs AdaDelta steps with CTC, returns log-probs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from benchbase.backend import Backend, Batch, DevicePlan
from benchbase.errors import BenchbaseError
from benchbase.specs import ModelSpec, OptimizerSpec
from benchbase_torch_ds2.model import DeepSpeech2

__all__ = ["TorchBackend"]


class TorchBackend(Backend):
    name = "torch"
    description = f"PyTorch {torch.__version__}: DS2 with cuDNN/oneDNN LSTMs, CTC, AdaDelta"

    def build(self, model: ModelSpec, optimizer: OptimizerSpec, feature_dimension: int, plan: DevicePlan,
              seed: int) -> None:
        self.device = _select_device(plan)
        if plan.threads:
            torch.set_num_threads(plan.threads)
        torch.manual_seed(seed)
        self.spec = model
        self.optimizer_spec = optimizer
        self.model = DeepSpeech2(model, feature_dimension).to(self.device)
        self.model.train()
        self.optimizer = torch.optim.Adadelta(
            [p for p in self.model.parameters() if p.requires_grad],
            lr=optimizer.learning_rate, rho=optimizer.rho, eps=optimizer.epsilon,
        )

    def train_step(self, batch: Batch) -> float:
        features, lengths = self._inputs(batch)
        labels = torch.from_numpy(batch.labels).to(self.device, non_blocking=True)
        label_lengths = torch.from_numpy(batch.label_lengths).to(self.device, non_blocking=True)
        log_probs, output_lengths = self.model(features, lengths)
        # mean_over_batch: each utterance's NLL summed over frames, then averaged over the batch.
        loss = torch.nn.functional.ctc_loss(
            log_probs.transpose(0, 1), labels, output_lengths, label_lengths,
            blank=self.spec.ctc_blank_index, reduction="sum", zero_infinity=True,
        ) / batch.size
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.optimizer_spec.gradient_clip_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.optimizer_spec.gradient_clip_norm)
        self.optimizer.step()
        return float(loss.detach())

    def predict(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        features, lengths = self._inputs(batch)
        self.model.eval()
        try:
            with torch.inference_mode():
                log_probs, output_lengths = self.model(features, lengths)
        finally:
            self.model.train()
        return log_probs.float().cpu().numpy(), output_lengths.cpu().numpy().astype(np.int32)

    def save_checkpoint(self, path: Path) -> None:
        with open(path, "wb") as handle:
            torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}, handle)

    def load_checkpoint(self, path: Path) -> None:
        state = torch.load(path, map_location=self.device, weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    def device_description(self) -> str:
        if self.device.type == "cuda":
            return f"cuda: {torch.cuda.get_device_name(self.device)}"
        return f"cpu: {torch.get_num_threads()} threads"

    def _inputs(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        features = torch.from_numpy(batch.features).to(self.device, non_blocking=True)
        lengths = torch.from_numpy(batch.feature_lengths).to(self.device).long()
        return features, lengths


def _select_device(plan: DevicePlan) -> torch.device:
    if plan.kind == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise BenchbaseError("the hardware profile asks for CUDA, but PyTorch sees no GPU; pass --device cpu")
    return torch.device("cuda", 0)

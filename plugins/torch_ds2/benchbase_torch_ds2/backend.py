"""The PyTorch backend: builds the model family's network, runs optimizer steps on its loss, and
returns what the family's ``predict`` returns (DS2: per-frame log-probabilities; RNN-T: the joint's
encoder projection).

Each model family is a folder (``ds2/``, ``rnnt/``) whose ``FAMILY`` meets ``family.ModelFamily``;
``build()`` picks the spec's once, and everything here is the same for every family.

On several devices it trains one process per device (torch's launcher starts them; the harness
has initialized the default process group: gloo on CPUs, NCCL on GPUs), each on its slice of the
global batch, combined as the run's training strategy says (``strategies``): under sync (the
default) DistributedDataParallel averages the gradients and the network's statistics (DS2's
BatchNorm, int8-emulated's activation ranges) are the global batch's, so that a step on N
processes is the step on the global batch that one process would take (up to the all-reduce's
rounding).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
import torch._dynamo  # (see below)

import benchbase_torch_ds2
from benchbase.backend import Backend, Batch, BuildContext, Capabilities, DevicePlan, Inputs
from benchbase.errors import BenchbaseError
from benchbase.families.folders import discover
from benchbase.specs import OptimizerSpec
from benchbase.specs.optimizer import AdaDeltaSpec, AdamWSpec, SGDSpec
from benchbase_torch_ds2.cuda_graphs import GraphedNetwork
from benchbase_torch_ds2.family import ModelFamily
from benchbase_torch_ds2.stage_timing import StageClock
from benchbase_torch_ds2.strategies import IMPLEMENTED, build_strategy

# torch.optim's first optimizer imports torch._dynamo (1.1 to 1.4 s of a run's build() on a 2-core
# machine, 4.4 s from a cold page cache): imported here, with torch itself, it stays in init, off
# the run clock, which starts at model creation (docs/BENCHMARKS.md, "Start-up on the clock").

__all__ = ["TorchBackend"]

DROPOUT_SEED_STRIDE = 1_000_003
PINNED_COPY_BYTES = 1 << 20
"""Host arrays at least this large go to a GPU through page-locked memory (``_tensor``)."""

FAMILIES = discover(benchbase_torch_ds2, "torch", ModelFamily)
"""The model families this package's folders hold: what the capabilities and the description name."""


class TorchBackend(Backend):
    name = "torch"
    description = f"PyTorch {torch.__version__}: {FAMILIES.summaries()}"
    capabilities = Capabilities(families=frozenset(FAMILIES), optimizers=frozenset({"adadelta", "adamw", "sgd"}),
                                devices=frozenset({"cpu", "cuda"}), max_devices=1024,
                                precisions=FAMILIES.all_precisions(),
                                family_precisions=FAMILIES.narrower_precisions(),
                                strategies=IMPLEMENTED, process_model="process_per_device")

    @classmethod
    def visible_devices(cls, kind: str) -> int | None:
        return None if kind == "cpu" else torch.cuda.device_count()  # CUDA_VISIBLE_DEVICES respected

    def build(self, context: BuildContext) -> None:
        self.family = FAMILIES.for_model(context.model)
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
        self.world_size = context.plan.world_size
        self.network = self.family.build_network(context).to(self.device)
        self.network.train()
        self.strategy = build_strategy(context, self.network, self.device)
        self.model = self.strategy.model  # what training runs forward through: the network, or DDP around it
        self.graphs = GraphedNetwork(self.network) if _graphs_serve(context, self.family, self.device) else None
        if self.graphs is not None:
            self.model = self.graphs
        self._graphs_reported = 0
        if context.plan.rank:
            # Every rank starts from the same weights (the seed above; DDP also broadcasts rank 0's),
            # but draws its own dropout masks: the same masks on every slice would correlate them.
            torch.manual_seed(context.seed + DROPOUT_SEED_STRIDE * context.plan.rank)
        self.optimizer = _optimizer([p for p in self.network.parameters() if p.requires_grad], context.optimizer)
        self.stages = StageClock(self.device)  # the step's phases, for step_timings()

    def train_step(self, batch: Batch) -> float:
        self.strategy.meter.reset()
        self.strategy.before_step()
        self.stages.start()
        loss = self.family.training_loss(self.model, batch, self.spec, self._timed_tensor, self._autocast)
        self.stages.mark("forward")
        self.optimizer.zero_grad(set_to_none=True)
        _schedule_learning_rate(self.optimizer, self.context.optimizer)
        clip = self.context.optimizer.gradient_clip_norm
        if self.scaler is None:
            loss.backward()
            self.stages.mark("backward")
            if clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
            self.optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            self.stages.mark("backward")
            if clip:
                self.scaler.unscale_(self.optimizer)  # the spec's norm is of the true gradient
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
            self.scaler.step(self.optimizer)  # skipped when a gradient overflowed
            self.scaler.update()
        self.stages.mark("optimizer")
        self.strategy.after_step()
        if self.world_size > 1:
            # This slice's loss is its own mean; the global batch's is the mean of the equal slices'.
            loss = loss.detach().clone()
            torch.distributed.all_reduce(loss)
            loss /= self.world_size
        return float(loss.detach())  # .item() waits for the device: the update is complete

    def step_timings(self) -> dict[str, float]:
        stages = getattr(self, "stages", None)  # before build(): nothing measured
        return {**(stages.seconds() if stages else {}), **self._graph_or_communication_timings()}

    def _graph_or_communication_timings(self) -> dict[str, float]:
        graph_sets = self._graph_sets()
        if graph_sets:
            # On the steps that captured a graph (or failed to): the totals so far, on record in metrics.jsonl.
            attempts = sum(graphs.captured + len(graphs.failures) for graphs in graph_sets)
            if attempts == self._graphs_reported:
                return {}
            self._graphs_reported = attempts
            return {"cuda_graphs": float(sum(graphs.captured for graphs in graph_sets)),
                    "cuda_graph_capture_s": round(sum(graphs.capture_seconds for graphs in graph_sets), 4),
                    "cuda_graph_memory_bytes": float(sum(graphs.memory_bytes for graphs in graph_sets)),
                    "cuda_graph_failures": float(sum(len(graphs.failures) for graphs in graph_sets))}
        if self.world_size == 1:
            return {}
        meter = self.strategy.meter
        return {"communication": meter.seconds, "communication_bytes": float(meter.bytes)}

    def start_profiler(self, directory: Path) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profiler = torch.profiler.profile(activities=activities)
        self.profiler.start()
        self.trace = Path(directory) / "torch-trace.json"

    def stop_profiler(self) -> None:
        self.profiler.stop()
        self.profiler.export_chrome_trace(str(self.trace))
        del self.profiler

    def predict(self, inputs: Inputs) -> np.ndarray:
        features, feature_lengths = self._tensor(inputs.features), self._tensor(inputs.feature_lengths)
        # The module itself, not its DDP wrapper: rank 0 predicts alone, with nothing to synchronize.
        self.network.eval()
        try:
            with torch.inference_mode(), self._autocast():
                outputs = self.family.predict(self.network, features, feature_lengths)
        finally:
            self.network.train()
        return outputs.float().cpu().numpy()

    def save_checkpoint(self, path: Path) -> None:
        # This learner's own state: in a run of several processes every rank writes its own file
        # (its dropout random state always differs from rank 0's; under a strategy other than sync,
        # its weights, BatchNorm statistics, quantizer ranges and optimizer too).
        state = {"model": self.network.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "rng": torch.get_rng_state(), "strategy": self.strategy.state_dict()}
        if self.device.type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        if self.scaler is not None:
            state["loss_scale"] = self.scaler.state_dict()
        with open(path, "wb") as handle:
            torch.save(state, handle)

    def load_checkpoint(self, path: Path) -> None:
        try:
            state = torch.load(path, map_location=self.device, weights_only=True)
            self.network.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            if self.scaler is not None:
                self.scaler.load_state_dict(state["loss_scale"])
            self.strategy.load_state_dict(state.get("strategy", {}))
        except Exception as error:  # noqa: BLE001 - torch.load reports a garbled file as any of a dozen exception types
            reason = (str(error).splitlines() or [type(error).__name__])[0]
            raise BenchbaseError(f"{path}: not a checkpoint of this model ({reason})") from None
        torch.set_rng_state(state["rng"].cpu())
        if "cuda_rng" in state and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["cuda_rng"].cpu(), self.device)

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.network.parameters() if p.requires_grad)

    def export_weights(self) -> dict[str, np.ndarray]:
        return self.family.export_weights(self.network)

    def import_weights(self, neutral: Mapping[str, np.ndarray]) -> None:
        self.family.layout.validate_weights(neutral, self.spec, self.context.feature_dimension)
        self.family.import_weights(self.network, neutral)

    def devices_in_use(self) -> tuple[str, ...]:
        if self.device.type == "cuda":
            return (f"cuda:{self.device.index} {torch.cuda.get_device_name(self.device)}",)
        return (f"cpu ({torch.get_num_threads()} threads)",)

    def device_description(self) -> str:
        graphs = (" (training step in CUDA graphs)" if getattr(self, "graphs", None) is not None else
                  " (loss in CUDA graphs)" if self._graph_sets() else "")
        return ", ".join(self.devices_in_use()) + graphs

    def _graph_sets(self) -> list:
        """The CUDA graphs training replays: the training forward's (``GraphedNetwork``), and those a
        network keeps of its own (``cuda_graph_sets()``: the transducer's loss, ``rnnt.graphed_loss``)."""
        own = getattr(getattr(self, "network", None), "cuda_graph_sets", None)
        return [graphs for graphs in (getattr(self, "graphs", None), *(own() if own else ())) if graphs is not None]

    def close(self) -> None:
        on_gpu = getattr(self, "device", None) is not None and self.device.type == "cuda"
        # Every reference to the modules goes, the strategy's included: a DDP reducer that outlives
        # this call is freed after the harness destroys the process group, and its destructor then
        # joins gloo's thread while holding the GIL that thread may still need (a hang at exit).
        for attribute in ("model", "graphs", "network", "strategy", "optimizer", "scaler", "profiler"):
            self.__dict__.pop(attribute, None)
        if on_gpu:
            torch.cuda.empty_cache()

    def host_array(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
        """Page-locked memory on a GPU run, so that the pipeline pads each batch where the copy to the
        GPU reads it directly (``_tensor`` finds it pinned and does not stage it); torch's caching
        host allocator reuses a freed batch's block. On a CPU: NumPy's."""
        if getattr(self, "device", None) is None or self.device.type != "cuda":
            return None
        return torch.empty(shape, dtype=torch.from_numpy(np.empty(0, dtype)).dtype, pin_memory=True).numpy()

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(array)
        if self.device.type == "cuda" and tensor.nbytes >= PINNED_COPY_BYTES and not tensor.is_pinned():
            # Through page-locked memory, then an asynchronous DMA: a paper-shaped batch's features
            # (150 x 1670 x 93 float32, 93 MB) reach an H100 in 4.2 ms instead of the 10.7 ms of a
            # copy from pageable memory, the same bytes; 4.6-8.7 ms off a training step through
            # the harness (docs/BENCHMARKS.md, "Full ds2 through the harness on one H100").
            tensor = tensor.pin_memory()
        return tensor.to(self.device, non_blocking=True)

    def _timed_tensor(self, array: np.ndarray) -> torch.Tensor:
        with self.stages.copy():
            return self._tensor(array)

    def _autocast(self):
        """torch.autocast in the run's mixed precision (bf16, fp16); off for the others."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        # A CUDA graph cannot hold autocast's cache of cast weights (make_graphed_callables refuses it);
        # without it each forward casts the weights again, which the graph replays at no launch cost.
        graphed = getattr(self, "graphs", None) is not None
        return torch.autocast(self.device.type, dtype=self.autocast_dtype, cache_enabled=not graphed)


ADAMW_KERNEL = "default"
"""torch.optim.AdamW's implementation: ``"default"`` (PyTorch's choice: a loop over the tensors on
a CPU, the foreach kernels on a GPU), ``"foreach"`` or ``"fused"``. Read when the backend is built."""


def _optimizer(parameters: list[torch.nn.Parameter], spec: OptimizerSpec) -> torch.optim.Optimizer:
    """The spec's optimizer with every field of it; the learning rate is set before each step."""
    if isinstance(spec, AdamWSpec):
        # PyTorch's AdamW decays decoupled, by lr * weight_decay, as the spec pins.
        kernel = {"default": {}, "foreach": {"foreach": True}, "fused": {"fused": True}}[ADAMW_KERNEL]
        return torch.optim.AdamW(parameters, lr=spec.learning_rate, betas=(spec.beta1, spec.beta2),
                                 eps=spec.epsilon, weight_decay=spec.weight_decay, **kernel)
    if isinstance(spec, AdaDeltaSpec):
        return torch.optim.Adadelta(parameters, lr=spec.learning_rate, rho=spec.rho, eps=spec.epsilon)
    if isinstance(spec, SGDSpec):
        return torch.optim.SGD(parameters, lr=spec.learning_rate, momentum=spec.momentum,
                               weight_decay=spec.weight_decay)
    raise BenchbaseError(f"the torch backend has no optimizer {spec.name!r}")


def _schedule_learning_rate(optimizer: torch.optim.Optimizer, spec: OptimizerSpec) -> None:
    """``spec.learning_rate_at`` of the coming step, counted by the optimizer's own state (so a
    restored checkpoint resumes the schedule where it stopped, and a step fp16's loss scaling
    skipped is no step)."""
    state = next(iter(optimizer.state.values()), {})
    learning_rate = spec.learning_rate_at(int(state.get("step", 0)))
    for group in optimizer.param_groups:
        group["lr"] = learning_rate


def _graphs_serve(context: BuildContext, family, device: torch.device) -> bool:
    """CUDA graphs for this run's training forward: on one CUDA device (DDP's hooks and the other
    strategies' communication stay eager), for a family whose forward can be captured, not in
    int8-emulated (its quantized recurrence is a Function of its own, not yet measured under a
    graph), and where the hardware profile leaves them on."""
    return (device.type == "cuda" and context.plan.cuda_graphs and not context.plan.distributed
            and family.cuda_graphs and context.model.precision != "int8-emulated")


def _select_device(plan: DevicePlan) -> torch.device:
    if plan.kind == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise BenchbaseError("the hardware profile asks for CUDA, but PyTorch sees no GPU; pass --device cpu")
    device = torch.device("cuda", plan.local_rank)  # one process per GPU: this rank's own
    torch.cuda.set_device(device)
    return device


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

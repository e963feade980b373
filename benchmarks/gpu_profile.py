"""Where a torch training step's time goes: the ``profile`` lever of gpu_bundle.py's runs.

The MFU table says how far a step is from the GPU's peak, not why. This lever patches the torch
backend's ``train_step`` in the measuring process (`gpu_bundle.py child --lever profile -- run ...`)
so that, after ``WARM`` steps (compilation, CUDA-graph capture), ``PROFILED`` steps of the real run
run under ``torch.profiler``. Into the run folder it writes ``profile.txt`` (the kernels by device
time) and ``profile.json``:

- the wall time of the profiled steps and the device's busy time in them (the sum of its kernels'
  times), so ``busy_share`` says how much of the step the GPU computed at all;
- the busy time by kind of kernel (``KINDS``: fused attention, matrix multiplies, cuDNN's RNN
  kernels, convolutions, normalizations and reductions, copies, elementwise), so a low MFU is either idle
  gaps (launches, host work) or time in kernels that do not use the tensor cores.

On a CPU (a smoke test) the same is measured on CPU operator times.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

WARM = 3
PROFILED = 5
KINDS = {
    "attention": r"flash|fmha|attention|sdpa",
    "matmul": r"gemm|cutlass|xmma|nvjet|cublas|matmul|addmm|\bmm\b|bmm|linear",
    "rnn (cuDNN)": r"rnn|lstm|persist",
    "convolution": r"conv|implicit_convolve|winograd|fft",
    "normalization, reduction, softmax": r"norm|reduce|softmax|welford|sum|mean",
    "copy": r"copy|memcpy|memset|cat|fill",
    "elementwise": r"elementwise|vectorized|pointwise|unrolled|activation|sigmoid|tanh|mul|add|silu|relu|dropout",
}
"""The first pattern (in this order) that a kernel's lower-cased name matches gives its kind."""


def kind_of(name: str) -> str:
    lowered = name.lower()
    return next((kind for kind, pattern in KINDS.items() if re.search(pattern, lowered)), "other")


def patch_train_step(folder: Path) -> None:
    """Profile steps WARM + 1 to WARM + PROFILED of the torch backend's run into ``folder``."""
    import torch
    from benchbase_torch_ds2 import backend as torch_backend

    original = torch_backend.TorchBackend.train_step
    state: dict = {"steps": 0}

    def train_step(self, batch):
        state["steps"] += 1
        cuda = self.device.type == "cuda"
        if state["steps"] == WARM + 1:
            activity = torch.profiler.ProfilerActivity
            state["profiler"] = torch.profiler.profile(activities=[activity.CPU, *([activity.CUDA] if cuda else [])])
            if cuda:
                torch.cuda.synchronize()
            state["profiler"].__enter__()
            state["started"] = time.perf_counter()
        loss = original(self, batch)  # returns a Python float: the step has finished on the device
        if state["steps"] == WARM + PROFILED:
            wall = time.perf_counter() - state["started"]
            state["profiler"].__exit__(None, None, None)
            write_summary(state["profiler"], wall, cuda, folder)
        return loss

    torch_backend.TorchBackend.train_step = train_step


def write_summary(profiler, wall_s: float, cuda: bool, folder: Path) -> None:
    events = profiler.key_averages()
    sort = "self_device_time_total" if cuda else "self_cpu_time_total"

    def self_time_us(event) -> float:
        if not cuda:
            return event.self_cpu_time_total
        return getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0.0)

    kernels = [(event.key, self_time_us(event)) for event in events if self_time_us(event) > 0]
    if cuda:  # only the kernels themselves: operators' device time repeats theirs
        kernels = [(name, us) for name, us in kernels if not name.startswith("aten::")]
    busy = sum(us for _, us in kernels) / 1e6
    by_kind: dict[str, float] = {}
    for name, us in kernels:
        by_kind[kind_of(name)] = by_kind.get(kind_of(name), 0.0) + us / 1e6
    summary = {"device": "cuda" if cuda else "cpu", "steps": PROFILED, "wall_s": round(wall_s, 4),
               "busy_s": round(busy, 4), "busy_share": round(busy / wall_s, 4) if wall_s else None,
               "by_kind_s": {kind: round(seconds, 4)
                             for kind, seconds in sorted(by_kind.items(), key=lambda item: -item[1])},
               "top": [{"kernel": name[:160], "s": round(us / 1e6, 5), "kind": kind_of(name)}
                       for name, us in sorted(kernels, key=lambda item: -item[1])[:25]]}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "profile.json").write_text(json.dumps(summary, indent=1) + "\n")
    (folder / "profile.txt").write_text(events.table(sort_by=sort, row_limit=40) + "\n")


def summarize(folder: Path) -> str:
    """One line per profiled run folder under ``folder``: busy share and the kinds' shares of busy time."""
    lines = []
    for path in sorted(folder.glob("*/profile.json")):
        profile = json.loads(path.read_text())
        busy = profile["busy_s"] or 1.0
        kinds = ", ".join(f"{kind} {100 * seconds / busy:.0f}%" for kind, seconds in profile["by_kind_s"].items())
        lines.append(f"{path.parent.name}: {profile['steps']} steps in {profile['wall_s']} s, device busy "
                     f"{100 * (profile['busy_share'] or 0):.0f}% ({kinds})")
    return "\n".join(lines)

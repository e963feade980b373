"""A projection, not a measurement: how long an epoch of the full ds2 would take under each training
strategy on the paper's systems' interconnects and on a 64-GPU cluster over 100 Gb/s Ethernet.

    python benchmarks/strategy_projection.py

The model (docs/BENCHMARKS.md, "A projection: epoch time of the full ds2"), every constant stated here:

- compute per step: the full ds2's fp32 step measured on one H100 through the harness, 803 ms
  for 150 utterances per device, scaled linearly to each system's per-device batch (the same
  learner everywhere: the projection isolates the interconnect);
- bytes per step: what the torch backend's strategies send, counted from the full ds2's own
  parameter tensors (the model built here, 25,623,030 parameters, float32): the whole gradient
  for sync, half for float16, PowerSGD's P and Q where torch's hook compresses (rank 1) and the
  whole tensor where it does not, the model every 4th step for local SGD, one model per step for
  ADPSGD (checked against the bytes ds2-mini's runs logged, in the same ratios);
- communication: a ring all-reduce of S bytes over N learners takes 2 (N - 1) / N * S / B
  + 2 (N - 1) * latency, B the slowest link's bandwidth per direction; ADPSGD sends and receives
  one model at once (full duplex), S / B + latency; hierarchical ADPSGD adds its group's
  all-reduce; links at their nominal rates (PCIe 3 x16 15.75 GB/s, PCIe 2 x1 0.5 GB/s, 100 Gb/s
  Ethernet 12.5 GB/s), latency 10 us per PCIe hop and 30 us per Ethernet hop;
- overlap: sync, the compressed variants and local SGD wait for their all-reduce after the
  backward pass (no overlap: an upper bound; DDP overlaps up to the backward pass's share);
  ADPSGD's exchange overlaps the whole step, so its step is max(compute, exchange);
- an epoch: LibriSpeech's 960 hours, 281,241 utterances, in global batches of the system's.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchbase.plugin_host.builtins.workloads import builtin_workload

H100_STEP_SECONDS = 0.803
H100_STEP_UTTERANCES = 150
EPOCH_UTTERANCES = 281_241
PCIE3_X16, PCIE2_X1, ETHERNET_100G = 15.75e9, 0.5e9, 12.5e9
PCIE_LATENCY, ETHERNET_LATENCY = 10e-6, 30e-6
POWERSGD_RANK = 1
LOCAL_SGD_PERIOD = 4


@dataclass(frozen=True)
class System:
    name: str
    learners: int
    batch_per_learner: int
    bandwidth: float
    latency: float
    group: int = 1
    """Learners per machine (hierarchical ADPSGD's groups); 1: one machine, no groups."""
    group_bandwidth: float = PCIE3_X16


SYSTEMS = (
    System("sys1 (4 GPUs, one PCIe3 x16 and three PCIe2 x1)", 4, 24, PCIE2_X1, PCIE_LATENCY),
    System("sys2 (4 GPUs, PCIe3 x16)", 4, 60, PCIE3_X16, PCIE_LATENCY),
    System("sys10 (2 GPUs, PCIe3 x16)", 2, 150, PCIE3_X16, PCIE_LATENCY),
    System("64 GPUs, 16 machines of 4, 100 Gb/s Ethernet", 64, 128, ETHERNET_100G, ETHERNET_LATENCY, group=4),
)


def payloads() -> dict[str, float]:
    """Bytes one learner sends per step under each strategy, from the full ds2's parameter tensors."""
    from benchbase_torch_ds2.ds2.model import DeepSpeech2

    workload = builtin_workload("ds2")
    network = DeepSpeech2(workload.model, workload.features.dimension)
    tensors = [p for p in network.parameters() if p.requires_grad]
    model_bytes = float(sum(p.numel() for p in tensors) * 4)
    powersgd = 0.0
    for tensor in tensors:
        rows = tensor.shape[0] if tensor.dim() else 1
        columns = tensor.numel() // rows
        rank = min(rows, columns, POWERSGD_RANK)
        compressed = (rows + columns) * rank
        powersgd += 4 * (compressed if compressed * 2 < rows * columns else rows * columns)
    return {"sync": model_bytes, "fp16_compress": model_bytes / 2, "powersgd": powersgd,
            "local_sgd": model_bytes / LOCAL_SGD_PERIOD, "adpsgd": model_bytes, "h-adpsgd": model_bytes}


def ring_allreduce(size: float, learners: int, bandwidth: float, latency: float) -> float:
    if learners < 2:
        return 0.0
    return 2 * (learners - 1) / learners * size / bandwidth + 2 * (learners - 1) * latency


def step_seconds(system: System, strategy: str, size: float) -> float:
    compute = H100_STEP_SECONDS * system.batch_per_learner / H100_STEP_UTTERANCES
    if strategy == "adpsgd":
        return max(compute, size / system.bandwidth + system.latency)
    if strategy == "h-adpsgd":
        within = ring_allreduce(size, system.group, system.group_bandwidth, PCIE_LATENCY)
        return compute + within if system.group == 1 else max(compute + within, size / system.bandwidth
                                                                + system.latency)
    return compute + ring_allreduce(size, system.learners, system.bandwidth, system.latency)


def main() -> None:
    sizes = payloads()
    strategies = list(sizes)
    print("bytes per step per learner (MB): " + ", ".join(f"{name} {size / 1e6:.2f}" for name, size in sizes.items()))
    print()
    print("| system | global batch | steps per epoch | compute per step (s) | compute alone | "
          + " | ".join(strategies) + " |")
    print("|---|---:|---:|---:|---:|" + "---:|" * len(strategies))
    for system in SYSTEMS:
        batch = system.learners * system.batch_per_learner
        steps = EPOCH_UTTERANCES / batch
        compute = H100_STEP_SECONDS * system.batch_per_learner / H100_STEP_UTTERANCES
        cells = [f"{steps * compute / 60:.2f}"]
        for strategy in strategies:
            if strategy == "h-adpsgd" and system.group == 1:
                cells.append("-")
                continue
            cells.append(f"{steps * step_seconds(system, strategy, sizes[strategy]) / 60:.2f}")
        print(f"| {system.name} | {batch} | {steps:.0f} | {compute:.3f} | " + " | ".join(cells) + " |")
    print(f"parameters: {sizes['sync'] / 4:,.0f}")


if __name__ == "__main__":
    main()

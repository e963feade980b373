"""HardwareProfile: a platform's devices, host, price and tuned input-pipeline defaults."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from benchbase.specs._base import Spec

__all__ = ["CPUSpec", "DeviceSpec", "HardwareProfile", "PipelineDefaults", "PriceSpec"]


class DeviceSpec(Spec):
    kind: Literal["gpu", "cpu"] = Field(description="Accelerator type the backends train on.")
    count: int = Field(ge=1, le=1024, description="Number of devices used for data-parallel training.")
    model: str = Field(min_length=1, max_length=120, description="Device model name.")
    memory_gb: float | None = Field(None, gt=0, le=100_000, description="Memory per device in GB.")
    interconnect: str = Field("", max_length=300, description="How the devices attach (PCIe lanes, NVLink).")
    cuda_graphs: bool = Field(True, description="Let a backend replay its training step's kernels from CUDA graphs "
                              "where it can (a launch-overhead lever on GPUs; the numerics stay within the error "
                              "model). false: every step eager.")
    dense_peak_tflops: dict[Literal["fp32", "tf32", "bf16", "fp16"], Annotated[float, Field(gt=0, le=100_000)]] = Field(
        default_factory=dict, max_length=4, description="One device's dense (not sparse) peak in TFLOPS per precision, "
        "for MFU; where absent, benchbase's table of known GPUs or, on a CPU, an estimate from its cores, clock and "
        "vector width (benchbase.telemetry.peak_flops), else MFU is not known.")


class CPUSpec(Spec):
    model: str = Field(min_length=1, max_length=120, description="Host CPU model.")
    sockets: int = Field(1, ge=1, le=16, description="CPU sockets.")
    cores: int = Field(ge=1, le=4096, description="Physical cores in total.")
    threads: int = Field(ge=1, le=8192, description="Hardware threads in total.")
    ghz: float | None = Field(None, gt=0, le=10, description="Base clock in GHz.")
    ram_gb: float = Field(gt=0, le=1_000_000, description="Host memory in GB.")
    vector_extensions: tuple[str, ...] = Field(
        (), max_length=32, description="The CPU's ML-relevant vector extensions (AVX2, AVX-512, AVX-512 BF16, AMX, "
        "...), as `benchbase profiles --detect` reads them: they change both numerics (kernel choice) and speed "
        "(bf16 units).")


class PriceSpec(Spec):
    total_usd: float | None = Field(None, ge=0, le=1e9, description="Whole system price.")
    gpus_usd: float | None = Field(None, ge=0, le=1e9, description="Price of the GPUs.")
    cpus_usd: float | None = Field(None, ge=0, le=1e9, description="Price of the CPUs.")
    hourly_usd: float | None = Field(None, ge=0, le=1e6, description="Rental price per hour (a cloud machine); "
                                     "cost-to-accuracy uses it instead of the amortized purchase price.")
    date: str = Field("", max_length=40, description="When the prices were taken.")


class PipelineDefaults(Spec):
    global_batch: int = Field(ge=1, le=65_536, description="Utterances per optimizer step over all devices.")
    batch_per_device: int = Field(ge=1, le=65_536, description="Utterances per device per step.")
    readers: int = Field(ge=1, le=256, description="Parallel shard readers.")
    reader_processes: int = Field(
        0, ge=0, le=256, description="Worker processes that read and pad the training batches "
        "(benchbase.data.reader_processes): 0, the reader threads read them and the pipeline's thread pads "
        "them, all in the run's process, where the GIL bounds them; N > 0, N processes do, for a many-core "
        "host feeding fast GPUs (the same batches, bit for bit; 2N of the longest batch in /dev/shm).")
    buffer: int = Field(ge=1, le=10_000, description="Prefetched batches.")
    shuffle_buffer: int = Field(2048, ge=1, le=1_000_000, description="Utterances in the shuffle buffer.")
    threads: int | None = Field(None, ge=1, le=4096, description="Compute threads for CPU training (None: all cores).")

    @model_validator(mode="after")
    def _batch_splits_evenly(self) -> PipelineDefaults:
        if self.global_batch % self.batch_per_device:
            raise ValueError(
                f"global_batch {self.global_batch} is not a multiple of batch_per_device {self.batch_per_device}"
            )
        return self


class HardwareProfile(Spec):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Profile name.")
    description: str = Field("", max_length=500, description="One line shown by `benchbase profiles`.")
    devices: DeviceSpec = Field(description="Training devices.")
    cpu: CPUSpec = Field(description="Host CPU and memory.")
    price: PriceSpec = Field(default_factory=PriceSpec, description="Hardware prices.")
    pipeline: PipelineDefaults = Field(description="Input-pipeline defaults tuned for this platform.")

    @model_validator(mode="after")
    def _batch_matches_devices(self) -> HardwareProfile:
        per_device = self.pipeline.global_batch // self.pipeline.batch_per_device
        if per_device != self.devices.count:
            raise ValueError(
                f"global_batch {self.pipeline.global_batch} / batch_per_device "
                f"{self.pipeline.batch_per_device} = {per_device}, but there are {self.devices.count} devices"
            )
        return self

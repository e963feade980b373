"""The GPUs a run uses, read through NVML (pynvml): utilization, memory, power and PCIe traffic."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from benchbase.telemetry.gpu_selection import ordering_caveat, select_gpus

__all__ = ["PCIE_PERIOD_S", "Gpu", "PcieReader", "open_nvml", "read_gpu"]

BYTES_PER_MB = 2**20
KB_PER_MB = 1024
# About every 10th sample at the default 30 ms interval; see PcieReader for why not every one.
PCIE_PERIOD_S = 0.3


@dataclass(frozen=True)
class Gpu:
    index: int  # NVML's index: PCI bus order over every GPU on the machine
    uuid: str
    name: str
    handle: Any


def open_nvml(visible: str | None = None, device_order: str | None = None) -> tuple[Any, list[Gpu], str]:
    """(pynvml, the GPUs that ``visible`` selects, a status line), or (None, [], why no GPU is read).

    ``visible``: a CUDA_VISIBLE_DEVICES-style selection (None: every GPU); ``device_order``:
    CUDA_DEVICE_ORDER, to warn when index entries may name other GPUs for CUDA than for NVML."""
    try:
        import pynvml
    except ImportError:
        return None, [], "pynvml is not installed"
    try:
        pynvml.nvmlInit()
        present = [_describe(pynvml, index) for index in range(pynvml.nvmlDeviceGetCount())]
    except Exception as error:  # noqa: BLE001 - NVMLError_LibraryNotFound and friends: no driver, no GPU
        return None, [], f"NVML unavailable: {error}"
    if not present:
        return None, [], "NVML found no GPU"
    selection = select_gpus(visible, [(gpu.index, gpu.uuid) for gpu in present])
    chosen = [present[index] for index, _ in selection.devices]
    notes = [*selection.problems, *filter(None, [ordering_caveat(selection, [gpu.name for gpu in chosen],
                                                                 device_order)])]
    status = _status(len(chosen), len(present), visible, notes)
    return (pynvml, chosen, status) if chosen else (None, [], status)


def _describe(nvml, index: int) -> Gpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    return Gpu(index=index, uuid=_text(nvml.nvmlDeviceGetUUID(handle)), name=_text(nvml.nvmlDeviceGetName(handle)),
               handle=handle)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value  # older pynvml releases return bytes


def _status(chosen: int, present: int, visible: str | None, notes: list[str]) -> str:
    which = "" if visible is None else f", selected by CUDA_VISIBLE_DEVICES={visible!r}"
    return "; ".join([f"{chosen} of {present} GPU(s) via NVML{which}", *notes])


def read_gpu(nvml, handle) -> dict:
    """One GPU's utilization (%), memory (MB) and power (W); None for what it cannot report."""
    try:
        utilization = nvml.nvmlDeviceGetUtilizationRates(handle)
        util, mem_util = utilization.gpu, utilization.memory
    except nvml.NVMLError:  # a GPU that fell off the bus must not end the sampling of the others
        util = mem_util = None
    try:
        mem_used_mb = nvml.nvmlDeviceGetMemoryInfo(handle).used / BYTES_PER_MB
    except nvml.NVMLError:
        mem_used_mb = None
    try:
        power_watts = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
    except nvml.NVMLError:  # some boards do not report power
        power_watts = None
    return {"util": util, "mem_util": mem_util, "mem_used_mb": mem_used_mb, "power_w": power_watts}


class PcieReader:
    """Each GPU's PCIe throughput, read in a thread of its own about every ``period`` seconds.

    NVML counts PCIe bytes over a 20 ms window inside the call, so reading TX and RX takes about
    40 ms per GPU: in the sampling loop that would stretch every 30 ms interval. In a thread it
    does not (ctypes lets go of the GIL during the call, and NVML may be called from several
    threads at once). Each reading goes into the first sample taken after it, so only about
    every 10th sample carries "pcie_tx_mb_s" and "pcie_rx_mb_s"; a board that does not count
    PCIe traffic reports None once and is not asked again.
    """

    def __init__(self, nvml, gpus: list[Gpu], period: float = PCIE_PERIOD_S) -> None:
        self._nvml = nvml
        self._gpus = gpus
        self._period = period
        self._fresh: dict[int, tuple[float | None, float | None]] = {}  # position → (TX, RX) not yet taken
        self._unsupported: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read_until_stopped, name="benchbase-pcie", daemon=True)

    def start(self) -> None:
        if self._gpus:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)  # an NVML call takes 20 ms; a hung one is left, a daemon

    def take(self, position: int) -> dict:
        """The GPU's newest reading not yet taken, as sample keys ({} when none is new)."""
        reading = self._fresh.pop(position, None)  # one pop: atomic against the thread's store
        if reading is None:
            return {}
        return {"pcie_tx_mb_s": reading[0], "pcie_rx_mb_s": reading[1]}

    def _read_until_stopped(self) -> None:
        while True:
            started = time.monotonic()
            for position, gpu in enumerate(self._gpus):
                if self._stop.is_set():
                    return
                if position not in self._unsupported:
                    self._fresh[position] = self._read(position, gpu.handle)
            if self._stop.wait(max(0.0, self._period - (time.monotonic() - started))):
                return

    def _read(self, position: int, handle) -> tuple[float | None, float | None]:
        nvml = self._nvml
        try:
            sent = nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_TX_BYTES)
            received = nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_RX_BYTES)
        except nvml.NVMLError_NotSupported:
            self._unsupported.add(position)
            return None, None
        except nvml.NVMLError:
            return None, None
        return round(sent / KB_PER_MB, 1), round(received / KB_PER_MB, 1)

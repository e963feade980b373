"""Utilization sampling in a separate process, every 30 ms: the machine's CPU and the CPU and
memory of the run's own processes (psutil) and, where NVML is present, the utilization, memory,
power and PCIe traffic of each GPU the run uses (pynvml). Without a GPU or the NVIDIA driver,
the GPU part is skipped and says why.

A process, not a thread: a thread that wakes every 30 ms must take the GIL from the
training loop each time, and those hand-offs slowed training measurably. The sampler's own
cost (its process's CPU time) is measured and reported with its summary.

One JSON line per sample: t (run-clock s), cpu (% of the machine), cores (% each), proc_cpu
(% of the machine used by the run's processes), rss_mb (their resident memory) and, per GPU
in the order of the summary's "gpus", util, mem_util, mem_used_mb, power_w and, about every
10th sample, pcie_tx_mb_s and pcie_rx_mb_s.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import psutil

from benchbase.process_guard import end_with_parent, parent_is_gone
from benchbase.run_folder import telemetry_summary
from benchbase.telemetry.gpu_selection import selection_text
from benchbase.telemetry.nvml import PcieReader, open_nvml, read_gpu
from benchbase.telemetry.process_tree import ProcessTree
from benchbase.telemetry.summary import Totals

__all__ = ["TelemetrySampler", "open_nvml"]


class TelemetrySampler:
    """Writes one JSON line per sample to ``path`` (see the module text) from a process of its own."""

    def __init__(self, path: Path, clock_origin: float, interval: float = 0.030, *,
                 processes: Sequence[int] = (), gpus: Sequence[str] | str | None = None) -> None:
        """``clock_origin``: time.perf_counter() at run_start (CLOCK_MONOTONIC, shared by processes).

        ``processes``: the PIDs of the run's processes on this machine, followed with all their
        descendants (default: this process). ``gpus``: the GPUs the run uses, as
        CUDA_VISIBLE_DEVICES entries (indices or UUIDs); None: this process's
        CUDA_VISIBLE_DEVICES, and every GPU where that is unset."""
        self.path = path
        self.clock_origin = clock_origin
        self.interval = interval
        followed = [int(pid) for pid in processes] or [os.getpid()]
        visible = selection_text(gpus) if gpus is not None else os.environ.get("CUDA_VISIBLE_DEVICES")
        context = multiprocessing.get_context("spawn")
        # Stopping is the parent closing its end of a pipe, not a multiprocessing.Event: an Event's
        # set() waits for every waiter to acknowledge, and hangs for good when the sampler died
        # waiting (a launcher that signals the whole process group kills it mid-wait).
        self._stop_reader, self._stop_writer = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_sample_until_stopped, name="benchbase-telemetry", daemon=True,
            args=(path, clock_origin, interval, self._stop_reader, os.getpid(), followed, visible,
                  os.environ.get("CUDA_DEVICE_ORDER")))

    def start(self) -> None:
        self._process.start()
        self._stop_reader.close()  # the sampler holds the only reading end now

    def stop(self) -> dict:
        """Stop sampling and return the summary (means, peaks, sample count, the sampler's own cost)."""
        self._stop_writer.close()  # the sampler's poll() sees the end of the pipe
        self._process.join(timeout=30)
        if self._process.is_alive():  # never leave a sampler behind, even a stuck one
            self._process.terminate()
            self._process.join(timeout=5)
        summary_file = telemetry_summary(self.path)
        try:
            summary = json.loads(summary_file.read_text(encoding="utf-8"))
            summary_file.unlink()
        except (OSError, ValueError):
            summary = {"samples": 0, "gpu_status": f"sampler process ended with code {self._process.exitcode}"}
        return summary


def _sample_until_stopped(path: Path, clock_origin: float, interval: float, stop, parent_pid: int,
                          processes: list[int], visible: str | None, device_order: str | None) -> None:
    end_with_parent(parent_pid)  # a killed run must not leave a sampler appending forever
    # Ctrl-C is the run's to handle (it reaches the sampler too when a terminal or a launcher signals
    # the whole process group): the run stops the sampler through the pipe, in order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    started_cpu, started_wall = time.process_time(), time.perf_counter()
    nvml, gpus, gpu_status = open_nvml(visible, device_order)
    tree = ProcessTree(processes)
    totals = Totals(len(gpus))
    pcie = PcieReader(nvml, gpus)
    pcie.start()
    psutil.cpu_percent(percpu=True)  # the first readings only set the baselines
    tree.read()
    try:
        with open(path, "a", encoding="utf-8") as sink:
            # poll() is True once the parent closed its end (stop) or died.
            while not stop.poll(interval) and not parent_is_gone(parent_pid):
                _sample(sink, clock_origin, tree, nvml, gpus, pcie, totals)
    except OSError as error:
        # A full disk or a vanished folder ends sampling; the run reports the missing samples.
        gpu_status = f"{gpu_status}; sampling stopped: {error.strerror or error}"
    finally:
        pcie.stop()
    summary = totals.summary(interval=interval, gpus=gpus, gpu_status=gpu_status,
                             sampler_cpu_seconds=time.process_time() - started_cpu,
                             sampler_wall_seconds=time.perf_counter() - started_wall,
                             processes_followed=tree.most_followed)
    try:
        telemetry_summary(path).write_text(json.dumps(summary), encoding="utf-8")
    except OSError:
        pass  # the parent then reports the sampler's summary as missing


def _sample(sink: IO[str], clock_origin: float, tree: ProcessTree, nvml, gpus, pcie: PcieReader,
            totals: Totals) -> None:
    cores = psutil.cpu_percent(percpu=True)
    proc_cpu, rss_mb = tree.read()
    record = {"t": round(time.perf_counter() - clock_origin, 4), "cpu": round(sum(cores) / len(cores), 1),
              "cores": cores, "proc_cpu": round(proc_cpu, 1), "rss_mb": round(rss_mb, 1)}
    if gpus:
        record["gpus"] = [{**read_gpu(nvml, gpu.handle), **pcie.take(position)}
                          for position, gpu in enumerate(gpus)]
    sink.write(json.dumps(record) + "\n")
    totals.add(record)

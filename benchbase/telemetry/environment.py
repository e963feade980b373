"""The software environment a run measured: what a reader needs to reproduce and compare it.

A benchmark that compares frameworks must say which versions it measured (MLPerf's system
description, AlgoPerf's logs). Recorded once at init, off the clock, into config.json, the
compliance log (``benchbase_environment``) and result.json:

- benchbase's version and git commit (with whether the tree had uncommitted changes);
- Python, the OS, the host (a hash of its name unless ``BENCHBASE_SHOW_HOST=1``: a results
  folder travels, a host name may be private);
- the installed versions of the frameworks and the numeric libraries, read from package
  metadata without importing them, and the backend's own distribution;
- where a framework is already imported (the backend's, by run end), its accelerator build:
  PyTorch's CUDA and cuDNN, TensorFlow's CUDA and cuDNN;
- the GPUs through NVML: model, driver and the CUDA version the driver supports.

The CPU (model, vector extensions, ISA caps) is ``benchbase.telemetry.cpu_features.cpu_record``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from benchbase import __version__
from benchbase.telemetry.cpu_features import cpu_record

__all__ = [
    "FRAMEWORK_DISTRIBUTIONS",
    "MACHINE_IDENTITY",
    "accelerator_builds",
    "backend_distribution",
    "environment_changes",
    "host_label",
    "run_environment",
    "software_environment",
    "source_revision",
]

FRAMEWORK_DISTRIBUTIONS = ("torch", "tensorflow", "tensorflow-cpu", "keras", "jax", "jaxlib", "optax", "numpy",
                           "librosa", "mlperf-logging")
"""Distributions whose versions go on record when installed."""
_GIT_TIMEOUT_S = 5
CHECKOUT = Path(__file__).resolve().parents[2]
"""Where a git checkout of benchbase has its .git (the folder above the package)."""


MACHINE_IDENTITY = ("host", "os", "accelerator.torch_cuda", "accelerator.torch_cudnn", "accelerator.tensorflow_cuda",
                    "accelerator.tensorflow_cudnn")
"""What two machines of one kind may differ in (a preempted run resumed on another node): their
name, their kernel's build, and the frameworks' CUDA builds, which are recorded only once a
framework is imported and follow from the packages' versions anyway."""


def run_environment(backend_name: str, backend_module: str) -> dict[str, object]:
    """What a run records at init: ``software_environment`` and the CPU (``cpu_record``)."""
    return {**software_environment(backend_name, backend_module), "cpu": cpu_record()}


def environment_changes(recorded: dict, current: dict, allowed: tuple[str, ...] = MACHINE_IDENTITY) -> list[str]:
    """Each field (a dotted path) where ``current`` differs from ``recorded``, as
    "path: recorded -> current", but those in ``allowed``. Both are compared as JSON holds them
    (``recorded`` comes from config.json: a tuple there is a list)."""
    def flat(record: dict, prefix: str = "") -> dict[str, object]:
        fields: dict[str, object] = {}
        for key, value in record.items():
            fields |= flat(value, f"{prefix}{key}.") if isinstance(value, dict) and value else {prefix + key: value}
        return fields

    before, after = flat(recorded), flat(json.loads(json.dumps(current, default=str)))
    return [f"{path}: {before.get(path)} -> {after.get(path)}" for path in sorted(before.keys() | after.keys())
            if before.get(path) != after.get(path) and path not in allowed]


def software_environment(backend_name: str = "", backend_module: str = "") -> dict[str, object]:
    """The record: a JSON-able mapping (see the module text). ``backend_name`` and
    ``backend_module`` find the distribution (name and version) the backend came from."""
    return {
        "benchbase": {"version": __version__, **source_revision()},
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "os": platform.platform(),
        "host": host_label(),
        "packages": _installed_versions(FRAMEWORK_DISTRIBUTIONS),
        "backend_distribution": backend_distribution(backend_name, backend_module),
        "accelerator": accelerator_builds(),
    }


def source_revision(package_dir: Path = CHECKOUT) -> dict[str, object]:
    """{"commit": the git commit of benchbase's checkout, "dirty": uncommitted changes} or
    commit None where benchbase is not run from a git checkout (an installed wheel)."""
    if not (package_dir / ".git").exists():
        return {"commit": None, "dirty": None}
    try:
        commit = _git(package_dir, "rev-parse", "HEAD")
        dirty = bool(_git(package_dir, "status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": dirty}


def host_label() -> str:
    """The host name where BENCHBASE_SHOW_HOST=1, else a stable 12-character hash of it."""
    name = socket.gethostname()
    if os.environ.get("BENCHBASE_SHOW_HOST") == "1":
        return name
    return "sha256:" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:12]


def accelerator_builds() -> dict[str, object]:
    """CUDA/cuDNN builds of the frameworks already imported, and the GPUs NVML sees."""
    builds: dict[str, object] = {}
    torch = sys.modules.get("torch")
    if torch is not None:
        builds["torch_cuda"] = getattr(torch.version, "cuda", None)
        cudnn = getattr(getattr(torch, "backends", None), "cudnn", None)
        builds["torch_cudnn"] = cudnn.version() if cudnn is not None and cudnn.is_available() else None
    tensorflow = sys.modules.get("tensorflow")
    if tensorflow is not None:
        info = dict(tensorflow.sysconfig.get_build_info())
        builds["tensorflow_cuda"] = info.get("cuda_version")
        builds["tensorflow_cudnn"] = info.get("cudnn_version")
    builds["gpus"] = _nvml_gpus()
    return builds


def _nvml_gpus() -> dict[str, object]:
    from benchbase.telemetry.nvml import open_nvml

    nvml, gpus, status = open_nvml()
    if nvml is None:
        return {"count": 0, "note": status}
    try:
        driver = nvml.nvmlSystemGetDriverVersion()
        cuda = nvml.nvmlSystemGetCudaDriverVersion()
        return {"count": len(gpus), "models": [gpu.name for gpu in gpus],
                "driver": driver.decode() if isinstance(driver, bytes) else driver,
                "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}"}
    finally:
        nvml.nvmlShutdown()


def entry_point_distributions(group: str = "benchbase") -> dict[str, str]:
    """Entry-point name -> "distribution version", for `benchbase plugins` and a run's environment."""
    found = {}
    for entry_point in metadata.entry_points(group=group):
        if entry_point.dist is not None:
            found[entry_point.name] = f"{entry_point.dist.name} {entry_point.dist.version}"
    return found


def backend_distribution(backend_name: str, backend_module: str) -> str | None:
    """"name version" of the distribution that registered the backend (its entry point), or that
    provides its module; None where neither is known (a plugin class defined in a test)."""
    registered = entry_point_distributions().get(backend_name)
    if registered:
        return registered
    names = metadata.packages_distributions().get(backend_module.partition(".")[0]) or []
    return f"{names[0]} {metadata.version(names[0])}" if names else None


def _installed_versions(names: tuple[str, ...]) -> dict[str, str]:
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def _git(directory: Path, *arguments: str) -> str:
    finished = subprocess.run(["git", "-C", str(directory), *arguments], capture_output=True, text=True,
                              timeout=_GIT_TIMEOUT_S, check=True)
    return finished.stdout.strip()

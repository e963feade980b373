"""The CPU's vector extensions, which change both a run's numerics and its speed.

oneDNN, XLA and ATen pick kernels by instruction set: another ISA adds float32 terms in
another order (numerics) and bf16 has hardware units only from AVX-512 BF16 on (speed). A
result therefore names them, and the tests can hold the frameworks to a lower ISA
(``benchbase.testing.isa``). Read from /proc/cpuinfo's flags on Linux; elsewhere the list is
empty and says so.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

__all__ = ["ISA_CAP_VARIABLES", "VECTOR_EXTENSIONS", "best_isa", "cpu_flags", "cpu_model", "cpu_record",
           "vector_extensions"]

VECTOR_EXTENSIONS: dict[str, str] = {
    "sse4_1": "SSE4.1",
    "sse4_2": "SSE4.2",
    "avx": "AVX",
    "avx2": "AVX2",
    "fma": "FMA",
    "avx512f": "AVX-512",
    "avx512_vnni": "AVX-512 VNNI",
    "avx512_bf16": "AVX-512 BF16",
    "avx512_fp16": "AVX-512 FP16",
    "amx_tile": "AMX",
    "amx_bf16": "AMX BF16",
    "amx_int8": "AMX INT8",
    "asimd": "NEON",
    "sve": "SVE",
}
"""/proc/cpuinfo flag -> the name a reader knows, for the extensions that decide ML kernels."""


ISA_CAP_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "XLA_FLAGS", "TF_ENABLE_ONEDNN_OPTS",
                     "OPENBLAS_CORETYPE", "BENCHBASE_ISA_CAP")
"""Environment variables that hold a framework to a lower ISA or switch its oneDNN kernels off:
a run under any of them measured other kernels than the CPU's best, so the record names them."""


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name as the OS reports it (at most 120 characters)."""
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()[:120] or "unknown CPU"
    except OSError:
        pass
    return (platform.processor() or platform.machine() or "unknown CPU")[:120]


def cpu_record() -> dict[str, object]:
    """What a result records of the CPU that ran it: model, vector extensions, the best ISA and
    any ISA caps in force (name -> value)."""
    caps = {name: os.environ[name] for name in ISA_CAP_VARIABLES if os.environ.get(name)}
    return {"model": cpu_model(), "vector_extensions": vector_extensions(), "best_isa": best_isa(), "isa_caps": caps}


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The first processor's feature flags ("flags" on x86, "Features" on ARM); empty where unknown."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def vector_extensions(flags: set[str] | None = None) -> list[str]:
    """The ML-relevant vector extensions this CPU has, in ``VECTOR_EXTENSIONS``' order."""
    flags = cpu_flags() if flags is None else flags
    return [name for flag, name in VECTOR_EXTENSIONS.items() if flag in flags]


def best_isa(flags: set[str] | None = None) -> str:
    """The widest x86 vector ISA the frameworks can use here: "avx512", "avx2", "sse4.1" or,
    off x86 or where the flags are unknown, the machine name (``platform.machine()``)."""
    flags = cpu_flags() if flags is None else flags
    if "avx512f" in flags:
        return "avx512"
    if "avx2" in flags and "fma" in flags:
        return "avx2"
    if "sse4_1" in flags:
        return "sse4.1"
    return platform.machine() or "unknown"

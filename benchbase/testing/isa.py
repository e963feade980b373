"""Hold the frameworks to a lower CPU instruction set, so that one machine checks two kernel paths.

A tolerance that holds on one CPU may not on another: oneDNN (TensorFlow, and PyTorch's
convolutions), ATen's vectorized kernels and XLA choose their kernels by the widest ISA the
CPU has. Each framework can be capped by an environment variable read when it starts, so a
test pass under a cap runs the kernels a machine with that ISA would run:

- ``ONEDNN_MAX_CPU_ISA`` (oneDNN: TensorFlow's and PyTorch's),
- ``ATEN_CPU_CAPABILITY`` (PyTorch's own vectorized kernels),
- ``XLA_FLAGS=--xla_cpu_max_isa=...`` (JAX),
- ``OPENBLAS_CORETYPE`` (NumPy's BLAS, which the float64 reference uses).

``make test-isa`` runs the numerics tests (``pytest -m numerics``) once more under the ISA
one step below this machine's best (``lower_isa``): an AVX-512 machine checks the AVX2 path,
an AVX2 machine the portable SSE4.1 path. Run it by hand as

    python -m benchbase.testing.isa [--cap avx2|sse4.1|below] -- COMMAND ...
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

from benchbase.telemetry.cpu_features import best_isa

__all__ = ["ISA_CAPS", "active_isa", "capped", "isa_environment", "lower_isa", "main"]

ISA_CAPS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "XLA_FLAGS": "--xla_cpu_max_isa=AVX2",
             "OPENBLAS_CORETYPE": "Haswell"},
    "sse4.1": {"ONEDNN_MAX_CPU_ISA": "SSE41", "ATEN_CPU_CAPABILITY": "default",
               "XLA_FLAGS": "--xla_cpu_max_isa=SSE4_2", "OPENBLAS_CORETYPE": "Nehalem"},
}
"""Cap name -> the environment that holds every framework to it ("native": no cap)."""
_BELOW = {"avx512": "avx2", "avx2": "sse4.1"}


def lower_isa(best: str | None = None) -> str | None:
    """The cap one step below this CPU's best ISA (None where there is none to take)."""
    return _BELOW.get(best or best_isa())


def isa_environment(cap: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (the process's environment) with the frameworks held to ``cap``; XLA_FLAGS
    already set are kept, the cap appended."""
    if cap not in ISA_CAPS:
        raise ValueError(f"unknown ISA cap {cap!r}; known: {', '.join(ISA_CAPS)}")
    environment = dict(os.environ if base is None else base)
    for name, value in ISA_CAPS[cap].items():
        if name == "XLA_FLAGS" and environment.get(name):
            value = f"{environment[name]} {value}"
        environment[name] = value
    environment["BENCHBASE_ISA_CAP"] = cap
    return environment


def capped() -> bool:
    """This process runs under a cap below the CPU's own ISA (``isa_environment``)."""
    return os.environ.get("BENCHBASE_ISA_CAP", "native") != "native"


def active_isa(backend: str = "") -> str:
    """The cap this process runs under, and for PyTorch the capability ATen actually chose."""
    cap = os.environ.get("BENCHBASE_ISA_CAP", "native")
    if backend == "torch":
        import torch

        return f"{cap} (ATen: {torch.backends.cpu.get_cpu_capability()})"
    return cap


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchbase.testing.isa",
                                     description="Run COMMAND with the frameworks held to a lower CPU ISA.")
    parser.add_argument("--cap", default="below", help="avx2, sse4.1, native, or below (one step below this CPU's)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (put it after --)")
    cap = lower_isa() if args.cap == "below" else args.cap
    if cap is None:
        print(f"isa: no lower ISA below {best_isa()} to check; running {command[0]} uncapped", file=sys.stderr)
        cap = "native"
    if cap not in ISA_CAPS:
        parser.error(f"unknown cap {cap!r}; known: {', '.join(ISA_CAPS)}, below")
    print(f"isa: running under the {cap} cap (this CPU: {best_isa()})", file=sys.stderr)
    os.execvpe(command[0], command, isa_environment(cap))
    return 0  # not reached: exec replaces the process


if __name__ == "__main__":
    raise SystemExit(main())

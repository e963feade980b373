"""Which GPUs a run uses, from a CUDA_VISIBLE_DEVICES-style selection, as NVML devices.

NVML numbers every GPU on the machine in PCI bus order. CUDA numbers the GPUs it sees
"fastest first" unless CUDA_DEVICE_ORDER=PCI_BUS_ID; among GPUs of one model, the tie is
broken by PCI bus, so both orders agree on machines of identical GPUs (the usual case).
We therefore read an index entry as an NVML index, which is exact under
CUDA_DEVICE_ORDER=PCI_BUS_ID or with identical GPUs; ``ordering_caveat`` says when that
assumption may not hold. A UUID entry needs no assumption, so it is the safer way to select.

Entries follow CUDA's rules: indices or UUIDs ("GPU-…", abbreviated to any prefix that names
one GPU alone), and CUDA ignores an invalid entry together with every entry after it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["GpuSelection", "ordering_caveat", "select_gpus", "selection_text"]

UUID_PREFIX = "GPU-"
MIG_PREFIX = "MIG-"


@dataclass
class GpuSelection:
    """The selected (NVML index, UUID) pairs in the selection's order, and what was wrong with it."""

    devices: list[tuple[int, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    by_index: bool = False  # some entry was an index, so the ordering assumption applies


def selection_text(gpus: Sequence[str] | str | None) -> str | None:
    """The selection as one CUDA_VISIBLE_DEVICES string (None: no selection, every GPU)."""
    if gpus is None or isinstance(gpus, str):
        return gpus
    return ",".join(str(entry) for entry in gpus)


def select_gpus(visible: str | None, devices: Sequence[tuple[int, str]]) -> GpuSelection:
    """The devices that ``visible`` (CUDA_VISIBLE_DEVICES syntax; None: all) selects from
    ``devices``, NVML's (index, UUID) pairs."""
    if visible is None:
        return GpuSelection(devices=list(devices))
    selection = GpuSelection()
    entries = [entry.strip() for entry in visible.split(",")]
    if entries == [""]:
        selection.problems.append("the selection is empty: the run sees no GPU")
        return selection
    for position, entry in enumerate(entries):
        if entry.upper().startswith(MIG_PREFIX):
            # A MIG instance reports no utilization of its own through NVML; the run goes on, unsampled.
            selection.problems.append(f"entry {entry!r} is a MIG instance, which is not sampled")
            continue
        device, problem = _match(entry, devices)
        if device is None:
            ignored = len(entries) - position - 1
            later = f"; it and the {ignored} after it are ignored, as CUDA does" if ignored else ""
            selection.problems.append(f"entry {entry!r} {problem}{later}")
            break
        if device in selection.devices:
            selection.problems.append(f"entry {entry!r} repeats a GPU already selected; it is sampled once")
            continue
        selection.devices.append(device)
        selection.by_index |= _is_index(entry)
    return selection


def ordering_caveat(selection: GpuSelection, names: Sequence[str], device_order: str | None) -> str | None:
    """A warning when index entries may name other GPUs for CUDA than for NVML (see the module text)."""
    if not selection.by_index or device_order == "PCI_BUS_ID" or len(set(names)) <= 1:
        return None
    return ("GPU indices were read in PCI bus order, but the GPUs differ in model and CUDA_DEVICE_ORDER is not "
            "PCI_BUS_ID, so CUDA may number them differently; select by UUID to be sure")


def _match(entry: str, devices: Sequence[tuple[int, str]]) -> tuple[tuple[int, str] | None, str]:
    """(device, ""), or (None, why the entry selects nothing)."""
    if _is_index(entry):
        return _by_index(int(entry), devices)
    if entry.upper().startswith(UUID_PREFIX) and len(entry) > len(UUID_PREFIX):
        return _by_uuid(entry, devices)
    return None, "is neither a GPU index nor a GPU UUID"


def _is_index(entry: str) -> bool:
    return re.fullmatch(r"-?[0-9]+", entry) is not None


def _by_index(index: int, devices: Sequence[tuple[int, str]]) -> tuple[tuple[int, str] | None, str]:
    for device in devices:
        if device[0] == index:
            return device, ""
    return None, f"is not a GPU index (NVML sees {len(devices)} GPU(s))"


def _by_uuid(prefix: str, devices: Sequence[tuple[int, str]]) -> tuple[tuple[int, str] | None, str]:
    # UUIDs are hexadecimal: compare without regard to case.
    matches = [device for device in devices if device[1].lower().startswith(prefix.lower())]
    if len(matches) == 1:
        return matches[0], ""
    if not matches:
        return None, "matches no GPU's UUID"
    return None, f"is ambiguous: it begins the UUIDs of {len(matches)} GPUs"

"""Changing a run's specs from the command line, and what that makes of it: MLPerf's divisions.

``--set workload.evaluation.beam_width=64 --set hardware.pipeline.readers=2``: a dotted
path into the workload or the hardware profile and a YAML value (``64``, ``true``, ``[a, b]``),
validated by the same pydantic models as the YAML files, with the same one-line errors.

The division (MLPerf's terms). A run is in the **closed** division when its workload is the
registered one in everything but the run choices below; then `benchbase check` holds it to the
registered workload. Anything else (an overridden hyperparameter, other targets, a workload
file that is not registered) is the **open** division: the log says so and lists what changed,
and `benchbase check` holds the run to its own stated config.json instead. The hardware profile
is the submitter's (the paper's platforms differ in batch size and readers); its overrides are
recorded, not judged.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

import yaml
from pydantic import BaseModel, ValidationError

from benchbase.errors import InputError, describe_validation_error

__all__ = ["CLOSED_RUN_CHOICES", "MISSING", "SPEC_ROOTS", "apply_overrides", "division_of", "field_at", "open_changes",
           "parse_override", "set_field_at"]

SPEC_ROOTS = ("workload", "hardware", "strategy")
CLOSED_RUN_CHOICES = ("max_minutes", "max_epochs", "model.precision")
"""What a closed run may choose: its time and epoch limits (which never change a TTA that is
reached) and the arithmetic precision, which `benchbase check` pins to what the run states."""

MISSING: Final = object()
"""What field_at finds where a dotted path leads nowhere (None is a value a spec may hold)."""


def parse_override(text: str) -> tuple[str, str, Any]:
    """``workload.a.b=VALUE`` -> ("workload", "a.b", parsed VALUE); a one-line InputError otherwise."""
    path, separator, raw = text.partition("=")
    root, _, inner = path.strip().partition(".")
    if not separator or root not in SPEC_ROOTS or not inner or "" in inner.split("."):
        raise InputError(f"--set {text!r}: expected workload.PATH=VALUE, hardware.PATH=VALUE or "
                         "strategy.PATH=VALUE, e.g. workload.evaluation.beam_width=64")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        raise InputError(f"--set {text!r}: the value is not YAML") from None
    return root, inner, value


def apply_overrides(spec: BaseModel, overrides: list[tuple[str, Any]], label: str) -> BaseModel:
    """``spec`` with each (dotted path, value) set, validated as a whole by its own model."""
    if not overrides:
        return spec
    data = spec.model_dump(mode="json")
    for path, value in overrides:
        if field_at(data, path) is MISSING:
            raise InputError(f"--set {label}.{path}: {_no_field(label, path, data)}")
        set_field_at(data, path, value)
    try:
        return type(spec).model_validate(data)
    except ValidationError as error:
        raise InputError(describe_validation_error(f"{label} with --set overrides", error)) from None


def field_at(data: Any, path: str) -> Any:
    """The value at a dotted path in nested dicts, or MISSING."""
    for part in path.split("."):
        if not isinstance(data, dict) or part not in data:
            return MISSING
        data = data[part]
    return data


def set_field_at(data: dict[str, Any], path: str, value: Any) -> None:
    """Set the value at a dotted path in nested dicts, adding the sections it names that are
    missing; a path through a value that is not a dict leaves ``data`` as it was."""
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        node = node.setdefault(part, {}) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node[last] = value


def _no_field(label: str, path: str, data: dict[str, Any]) -> str:
    """Why ``path`` cannot be set in ``data``: a section on the way is missing, or the field."""
    *parents, last = path.split(".")
    section = ".".join(parents)
    if parents and field_at(data, section) is None:  # an optional section that is off (workload.augmentation)
        return f"{label}.{section} is none (off); set it whole, e.g. --set '{label}.{section}={{{last}: VALUE}}'"
    if parents and not isinstance(field_at(data, section), dict):
        return f"{label} has no {section} section to set {last} in"
    return f"{label} has no field {path!r}"


def open_changes(registered: Mapping[str, Any] | None, used: Mapping[str, Any]) -> list[str]:
    """What makes a run open: every path where the workload it used departs from the registered
    one, outside the closed division's run choices ("path: registered -> used")."""
    if registered is None:
        return ["the workload is not a registered one"]
    changes: list[str] = []
    _differences(registered, used, "", changes)
    return [change for change in changes if change.split(":")[0] not in CLOSED_RUN_CHOICES]


def division_of(changes: list[str]) -> str:
    return "open" if changes else "closed"


def _differences(registered: Any, used: Any, path: str, found: list[str]) -> None:
    if isinstance(registered, Mapping) and isinstance(used, Mapping):
        for key in sorted(set(registered) | set(used)):
            _differences(registered.get(key), used.get(key), f"{path}.{key}" if path else str(key), found)
        return
    if _normalized(registered) != _normalized(used):
        found.append(f"{path}: {_short(registered)} -> {_short(used)}")


def _normalized(value: Any) -> Any:
    """Lists and tuples alike, ints and equal floats alike (a spec dumped to JSON and read back)."""
    if isinstance(value, list | tuple):
        return [_normalized(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _normalized(item) for key, item in value.items()}
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return copy.deepcopy(value)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."

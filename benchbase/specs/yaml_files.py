"""Loading specs from YAML with errors that name the file and what is wrong, in one line."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from benchbase.errors import InputError, describe_validation_error

__all__ = ["load_spec_file", "load_spec_text", "names_a_file"]

SpecT = TypeVar("SpecT", bound=BaseModel)


def names_a_file(name_or_path: str) -> bool:
    """Whether a --workload/--hw argument names a YAML file rather than a registered spec."""
    return name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path


def load_spec_file(spec_type: type[SpecT], path: Path) -> SpecT:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read: {error}") from None
    return load_spec_text(spec_type, text, str(path))


def load_spec_text(spec_type: type[SpecT], text: str, source: str) -> SpecT:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f"line {where.line + 1}: " if where is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise InputError(f"{source}: malformed YAML: {line}{problem}") from None
    if data is None:  # nothing but blanks and comments
        raise InputError(f"{source}: the file is empty; expected a mapping of fields")
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a mapping of fields, got {type(data).__name__}")
    try:
        return spec_type.model_validate(data)
    except ValidationError as error:
        raise InputError(describe_validation_error(source, error)) from None

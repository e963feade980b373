"""A spec as rows of (dotted field, value, meaning), for `benchbase workloads --show`."""

from __future__ import annotations

import json
from collections.abc import Iterator

from pydantic import BaseModel

__all__ = ["spec_rows"]


def spec_rows(spec: BaseModel, prefix: str = "") -> Iterator[tuple[str, str, str]]:
    """Every leaf field of ``spec``, depth first, with its description from the spec's own model."""
    for name, field in type(spec).model_fields.items():
        value = getattr(spec, name)
        path = f"{prefix}{name}"
        if isinstance(value, BaseModel):
            yield from spec_rows(value, f"{path}.")
        elif isinstance(value, tuple) and value and all(isinstance(item, BaseModel) for item in value):
            for index, item in enumerate(value):
                yield from spec_rows(item, f"{path}.{index}.")
        else:
            yield path, _shown(value), field.description or ""


def _shown(value) -> str:
    if isinstance(value, tuple):
        return ", ".join(str(item) for item in value) or "(none)"
    if value is None:
        return "none"
    return value if isinstance(value, str) else json.dumps(value)

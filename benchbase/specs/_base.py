"""The base every spec shares: frozen, no unknown fields, so a typo in YAML is an error."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Spec"]


class Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

"""What every family's framework-neutral weight layout shares: checking weights against it, comparing two sets."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from benchbase.errors import BenchbaseError

__all__ = ["check_against_layout", "differing_weights"]


def check_against_layout(weights: Mapping[str, np.ndarray], layout: Mapping[str, tuple[int, ...]]) -> None:
    """Raise ``BenchbaseError`` unless ``weights`` has exactly ``layout``'s names and shapes.

    Backends call their family's ``validate_weights`` first thing in ``import_weights``, so a
    wrong array never half-loads.
    """
    missing, unknown = sorted(set(layout) - set(weights)), sorted(set(weights) - set(layout))
    if missing or unknown:
        raise BenchbaseError(f"weights do not fit the layout: missing {missing or 'none'}, unknown {unknown or 'none'}")
    for name, shape in layout.items():
        found = tuple(np.shape(weights[name]))
        if found != shape:
            raise BenchbaseError(f"weight {name}: shape {found}, the layout has {shape}")


def differing_weights(first: Mapping[str, np.ndarray], second: Mapping[str, np.ndarray]) -> list[str]:
    """Names whose arrays differ (or exist on one side only), in the first mapping's order."""
    names = list(first) + [name for name in second if name not in first]
    return [name for name in names
            if name not in first or name not in second
            or np.shape(first[name]) != np.shape(second[name]) or not np.array_equal(first[name], second[name])]

"""Checkpoints as one .npz file: every array of the training state, named by its path in the tree.

npz rather than pickle: loading runs no code, and the arrays are readable without JAX.
Loading checks the file against the state a fresh build() made (same names, same shapes),
so a checkpoint of another model is refused before any weight is touched.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import jax
import numpy as np

from benchbase.errors import BenchbaseError

__all__ = ["read_state", "write_state"]

FORMAT = "benchbase-jax-ds2/1"
_FORMAT_KEY = "__format__"


def write_state(path: Path, state) -> None:
    """Write every leaf of the pytree ``state`` to exactly ``path``."""
    arrays = {name: np.asarray(leaf) for name, leaf in _named_leaves(state)[0].items()}
    buffer = io.BytesIO()
    np.savez(buffer, **{_FORMAT_KEY: np.array(FORMAT)}, **arrays)
    Path(path).write_bytes(buffer.getvalue())


def read_state(path: Path, template):
    """The state in ``path``, shaped like ``template`` (a pytree of the same structure)."""
    expected, treedef = _named_leaves(template)
    stored = _read_arrays(Path(path))
    _check_names(path, expected, stored)
    leaves = []
    for name, leaf in expected.items():
        if stored[name].shape != leaf.shape:
            raise BenchbaseError(f"{path}: {name} has shape {stored[name].shape}, this model's is {leaf.shape}")
        leaves.append(stored[name].astype(leaf.dtype))
    return jax.tree_util.tree_unflatten(treedef, leaves)


def _named_leaves(state) -> tuple[dict, jax.tree_util.PyTreeDef]:
    leaves, treedef = jax.tree_util.tree_flatten_with_path(state)
    return {jax.tree_util.keystr(key): leaf for key, leaf in leaves}, treedef


def _read_arrays(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        raise BenchbaseError(f"{path}: not a readable checkpoint ({error})") from None
    found = arrays.pop(_FORMAT_KEY, None)
    if found is None or str(found) != FORMAT:
        raise BenchbaseError(f"{path}: not a {FORMAT} checkpoint (format {found})")
    return arrays


def _check_names(path: Path, expected: dict, stored: dict) -> None:
    missing, unexpected = sorted(set(expected) - set(stored)), sorted(set(stored) - set(expected))
    if missing or unexpected:
        raise BenchbaseError(f"{path}: does not fit this model (missing {missing[:3]}, unexpected {unexpected[:3]})")

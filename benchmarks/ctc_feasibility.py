"""Output frames per label of every utterance of a store, at 1 and 2 Conformer subsampling layers.

CTC needs an output frame per label at least: the fewest frames per label over a subset says
whether a subsampling rate can align its fastest voices. Reads the lengths of the store's
utterances (the label count includes the doubled-letter separator, or is the pieces of a store of
sentencepiece pieces) and prints, per subset, the
smallest ratio and how many utterances fall under 1 and 1.2 (docs/BENCHMARKS.md, "conformer-mini:
the Conformer family on 2 CPU cores").

    python benchmarks/ctc_feasibility.py                       # the cached synthetic ds2-mini store
    python benchmarks/ctc_feasibility.py --store DIR
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from benchbase.data.store import FeatureStore
from benchbase.data.workload_data import default_cache, ensure_workload_data
from benchbase.families.conformer.spec import subsampled_frames
from benchbase.plugin_host.builtins.workloads import builtin_workload

SUBSETS = ("train", "dev-clean", "dev-other", "test-clean", "test-other")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, help="prepared feature store (default: ds2-mini's cached one)")
    arguments = parser.parse_args()
    store = FeatureStore(arguments.store or ensure_workload_data(builtin_workload("ds2-mini"), None, default_cache()))
    print(f"{'subset':<11} {'utts':>5} | per layer count: min frames/label, under 1, under 1.2")
    for subset in SUBSETS:
        frames, labels = _lengths(store, subset)
        cells = []
        for layers in (1, 2):
            ratio = subsampled_frames(frames, layers) / labels
            cells.append(f"{layers}: {ratio.min():.2f} {int((ratio < 1).sum()):>4} {int((ratio < 1.2).sum()):>4}")
        print(f"{subset:<11} {len(frames):>5} | " + " | ".join(cells))


def _lengths(store: FeatureStore, subset: str) -> tuple[np.ndarray, np.ndarray]:
    utterances = [utterance for shard in store.shards((subset,)) for utterance in store.read(shard)]
    return (np.array([u.features.shape[0] for u in utterances]), np.array([len(u.labels) for u in utterances]))


if __name__ == "__main__":
    main()

"""Draws the README's figures from real run folders into docs/figures/.

    python benchmarks/readme_figures.py RUN_DIR [RUN_DIR ...]

Each RUN_DIR is a run folder or a folder of runs (as `benchbase report` takes them); the
figures are the report's own (benchbase.report.figures), so the README shows what users get.
The folders' names become the legend's group names. The figures in docs/figures come from

    benchbase run --workload ds2-mini --backend torch --hw cpu --max-epochs 16 --out runs/readme/torch
    benchbase run --workload ds2-mini --backend tf --hw cpu --max-epochs 16 --out runs/readme/tf
    python benchmarks/readme_figures.py runs/readme/torch runs/readme/tf

(each run stops when it has reached every target; both did, in 11 and 10 epochs).
"""

from __future__ import annotations

import sys
from pathlib import Path

from benchbase.report import load_groups
from benchbase.report.figures import write_figures

OUT = Path(__file__).resolve().parents[1] / "docs" / "figures"


def main(arguments: list[str]) -> None:
    if not arguments:
        raise SystemExit(__doc__)
    for path in write_figures(load_groups([Path(argument) for argument in arguments]), OUT):
        print(path)


if __name__ == "__main__":
    main(sys.argv[1:])

"""conformer-mini under every training strategy the torch backend implements, end to end from the
CLI: two processes on the cpu2 profile, one epoch each, then `benchbase check` on the run folder.

Every run is open: the tests' small corpus is not conformer-mini's registered data, which the log's
open changes list first; every strategy but sync adds itself to them, and check passes each run as
open. What each strategy communicated (the log's ``benchbase_communication``, per step, from
rank 0's learner) shows that its own engine trained the Conformer, not sync's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_benchbase

pytestmark = pytest.mark.slow

STRATEGIES = {
    "sync": (),
    "local_sgd": ("--set", "strategy.period=2"),
    "hierarchical": ("--set", "strategy.group_size=1", "--set", "strategy.period=2"),  # two groups of one learner
    "powersgd": ("--set", "strategy.start_iteration=2"),  # compressed from the second of the epoch's steps
    "fp16_compress": (),
    "bf16_compress": (),
    "adpsgd": ("--set", "strategy.peer=random"),
    "h-adpsgd": ("--set", "strategy.group_size=1"),  # two groups of one learner: ADPSGD between them
}
"""Each run takes 11 to 16 s on 2 busy cores (about 5 global batches of 32 on the small corpus)."""


def _events(log: Path) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for line in log.read_text().splitlines():
        event = json.loads(line.partition(" ")[2])
        found.setdefault(event["key"], []).append(event)
    return found


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_conformer_mini_trains_under_the_strategy_and_passes_check(strategy, conformer_store, tmp_path):
    out = tmp_path / "run"
    finished = run_benchbase("run", "--workload", "conformer-mini", "--backend", "torch", "--hw", "cpu2", "--data",
                             str(conformer_store), "--out", str(out), "--max-epochs", "1", "--no-final-eval",
                             "--strategy", strategy, *STRATEGIES[strategy], timeout=600)
    assert finished.returncode == 3, finished.stderr[-3000:]  # aborted at max_epochs: a status, not a failure
    result = json.loads((out / "result.json").read_text())
    assert (result["status"], result["epochs"], result["world_size"]) == ("aborted", 1, 2)

    events = _events(out / "mllog.log")
    assert events["submission_division"][0]["value"] == "open"
    assert events["benchbase_strategy"][0]["value"]["name"] == strategy
    changed = [] if strategy == "sync" else [f"strategy: 'sync' -> '{strategy}'"]
    data = ["data.corpus.seed: 0 -> 7", "data.corpus.utterances: 3000 -> 240"]
    assert events["benchbase_open_changes"][0]["value"] == changed + data
    model = 4 * result["parameter_count"]  # float32 bytes
    communicated = events["benchbase_communication"][0]["value"]
    assert communicated["steps"] > 0
    per_step = communicated["bytes_per_step"]
    if strategy in ("sync", "adpsgd", "h-adpsgd"):
        assert per_step == model  # every gradient all-reduced, or one model sent, every step
    elif strategy in ("fp16_compress", "bf16_compress"):
        assert per_step == model / 2
    else:
        assert 0 < per_step < model  # averaged every other step, or compressed

    checked = run_benchbase("check", str(out))
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert "1/1 log(s) pass rule set" in " ".join(checked.stdout.split())

"""A closed run trains on the workload's registered data: a store of another corpus, or of a part of
the registered one, makes the run open, and `check` fails a log that claims otherwise."""

from __future__ import annotations

import json
import shutil

import pytest
from cli_helpers import run_benchbase

from benchbase.data.registered import LIBRISPEECH_UTTERANCES, data_departures, store_data_record
from benchbase.data.store import FeatureStore
from benchbase.plugin_host.builtins.workloads import builtin_workload


def _librispeech(listed: dict[str, int]) -> dict:
    return {"corpus": {"kind": "librispeech-layout"},
            "subsets": {name: {"listed": count, "kept": count, "ids_sha256": "x"} for name, count in listed.items()}}


def test_librispeech_is_registered_at_its_official_counts():
    workload = builtin_workload("ds2")
    assert sum(LIBRISPEECH_UTTERANCES[name] for name in workload.data.train) == 281_241
    assert data_departures(workload, _librispeech(LIBRISPEECH_UTTERANCES)) == []
    part = dict(LIBRISPEECH_UTTERANCES, **{"train-other-500": 1000})
    assert data_departures(workload, _librispeech(part)) == ["data.train-other-500: 148688 utterances -> 1000"]
    del part["test-other"]
    assert "data.test-other: prepared -> missing from the store" in data_departures(workload, _librispeech(part))


def test_the_synthetic_workloads_register_benchbases_corpus(small_store):
    workload = builtin_workload("ds2-mini")
    registered = {"corpus": {"kind": "synthetic", "generator_version": 3, "seed": 0, "utterances": 3000,
                             "text": {"kind": "grammar"}}, "subsets": {name: {} for name in
                                                                      ("train", "dev-clean", "dev-other",
                                                                       "test-clean", "test-other")}}
    assert data_departures(workload, registered) == []
    # The tests' corpus: 240 utterances of seed 7.
    departures = data_departures(workload, store_data_record(FeatureStore(small_store).description))
    assert departures == ["data.corpus.seed: 0 -> 7", "data.corpus.utterances: 3000 -> 240"]
    assert data_departures(builtin_workload("ds2"), store_data_record(FeatureStore(small_store).description))[0] \
        == "data.corpus.kind: 'librispeech-layout' -> 'synthetic'"


@pytest.mark.slow
def test_a_run_on_a_small_corpus_is_open_and_a_closed_claim_fails_check(small_store, tmp_path):
    out = tmp_path / "run"
    finished = run_benchbase("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu", "--data",
                             str(small_store), "--out", str(out), "--max-epochs", "1", "--no-final-eval")
    assert finished.returncode == 3, finished.stderr
    config, result = (json.loads((out / name).read_text()) for name in ("config.json", "result.json"))
    assert config["division"] == result["division"] == "open"
    assert config["open_changes"] == ["data.corpus.seed: 0 -> 7", "data.corpus.utterances: 3000 -> 240"]
    events = {}
    for line in (out / "mllog.log").read_text().splitlines():
        event = json.loads(line.split(" ", 1)[1])
        events.setdefault(event["key"], event["value"])
    assert events["submission_division"] == "open" and events["benchbase_open_changes"] == config["open_changes"]
    assert events["benchbase_data"]["subsets"]["train"]["listed"] == events["train_samples"]
    checked = run_benchbase("check", str(out))
    assert checked.returncode == 0, checked.stdout

    claimed = tmp_path / "claimed"
    shutil.copytree(out, claimed)
    _claim_closed(claimed)
    checked = run_benchbase("check", "--json", str(claimed))
    assert checked.returncode == 1
    division = next(finding for finding in json.loads(checked.stdout)["logs"][0]["findings"]
                    if finding["rule"] == "division")
    assert any("data is not the registered workload's: data.corpus.seed: 0 -> 7; data.corpus.utterances: 3000 -> 240"
               in message for message in division["messages"]), division


def _claim_closed(folder):
    """The log and config.json doctored to claim the closed division with nothing changed."""
    lines = (folder / "mllog.log").read_text().splitlines(keepends=True)
    for index, line in enumerate(lines):
        event = json.loads(line.split(" ", 1)[1])
        if event["key"] in ("submission_division", "benchbase_open_changes"):
            event["value"] = "closed" if event["key"] == "submission_division" else []
            lines[index] = ":::MLLOG " + json.dumps(event) + "\n"
    (folder / "mllog.log").write_text("".join(lines))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "division": "closed", "open_changes": []}))
    result = json.loads((folder / "result.json").read_text())
    (folder / "result.json").write_text(json.dumps({**result, "division": "closed"}))

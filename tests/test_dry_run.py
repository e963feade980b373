"""`benchbase run --dry-run` refuses what the run refuses before the clock, in the same line: the
store's refusals from the harness's init (harness/initialization.py) among them."""

from __future__ import annotations

import shutil

import pytest
from cli_helpers import benchbase_in_process

RUN = ("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu", "--max-epochs", "1")
PIECES = ("--set", "workload.data.tokens={kind: sentencepiece, size: 63}", "--set", "workload.model.symbols=64")
HUGE_BATCH = ("--set", "hardware.pipeline.global_batch=4096", "--set", "hardware.pipeline.batch_per_device=4096")


def test_a_store_prepared_for_other_tokens_is_refused_by_the_dry_run_as_by_the_run(capsys, tmp_path, small_store):
    arguments = (*RUN, "--data", str(small_store), *PIECES)
    code, said, dry_err = benchbase_in_process(capsys, *arguments, "--out", str(tmp_path / "dry"), "--dry-run")
    assert code == 2 and said == "" and dry_err.count("\n") == 1
    assert "labels prepared for other tokens" in dry_err
    code, _, err = benchbase_in_process(capsys, *arguments, "--out", str(tmp_path / "run"))
    assert code == 2 and err == dry_err
    assert not (tmp_path / "dry").exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize(("damage", "refusal"), [
    ("batch", "fewer than one global batch of 4096: no batch would be trained"),
    ("shard", "checksum mismatch (truncated or altered since it was prepared)"),
])
def test_a_store_the_run_would_refuse_fails_the_dry_run(capsys, tmp_path, small_store, damage, refusal):
    store, extra = small_store, ()
    if damage == "batch":
        extra = HUGE_BATCH
    else:
        store = tmp_path / "store"
        shutil.copytree(small_store, store)
        shard = sorted(store.glob("train/shard-*.features.npy"))[0]
        shard.write_bytes(shard.read_bytes()[:-16])
    code, said, err = benchbase_in_process(capsys, *RUN, "--data", str(store), *extra, "--out", str(tmp_path / "dry"),
                                           "--dry-run")
    assert code == 2 and said == "" and err.count("\n") == 1 and refusal in err, err


def test_a_sound_store_passes_the_dry_run(capsys, tmp_path, small_store, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    code, said, err = benchbase_in_process(capsys, *RUN, "--data", str(small_store), "--out", str(tmp_path / "dry"),
                                           "--dry-run")
    assert code == 0 and "every check before the clock passes" in said, err

"""A store that proves its integrity: checksums, the corpus it came from, verification before a
run and on demand, and every corpus file accounted for."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from cli_helpers import run_benchbase
from test_failures import _linear_run

from benchbase.data.integrity import STAMP_FILE, verified_store, verify_store
from benchbase.data.prepare import prepare_store
from benchbase.data.store import FeatureStore, features_path
from benchbase.errors import InputError


@pytest.fixture
def store_copy(small_store, tmp_path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(small_store, copy)
    return copy


def _a_shard(store: Path) -> Path:
    return FeatureStore(store).shards(["train"])[0]


def test_a_prepared_store_matches_its_checksums(small_store):
    assert verify_store(small_store) == []
    finished = run_benchbase("data", "verify", str(small_store))
    assert finished.returncode == 0 and "shards match their checksums" in finished.stdout


def test_a_truncated_shard_is_found_on_demand_and_refused_before_a_run(store_copy, tmp_path):
    features = features_path(_a_shard(store_copy))
    features.write_bytes(features.read_bytes()[:1000])
    problems = verify_store(store_copy)
    assert problems == [f"{features}: checksum mismatch (truncated or altered since it was prepared)"]
    finished = run_benchbase("data", "verify", str(store_copy))
    assert finished.returncode == 1 and "checksum mismatch" in finished.stdout
    with pytest.raises(InputError, match="checksum mismatch"):
        _linear_run(store_copy, tmp_path / "run")
    assert not (tmp_path / "run" / "result.json").exists()


def test_verification_is_remembered_until_the_data_changes(store_copy):
    verified_store(store_copy)
    stamp = store_copy / STAMP_FILE
    assert json.loads(stamp.read_text())["files"]
    index = _a_shard(store_copy)
    index.write_bytes(index.read_bytes() + b"\0")  # altered after the stamp: verified again, and refused
    with pytest.raises(InputError, match=f"{index}: checksum mismatch"):
        verified_store(store_copy)


def test_a_shard_rewritten_at_its_size_with_its_mtime_set_back_is_verified_again(store_copy, tmp_path):
    verified_store(store_copy)  # stamped: the next run trusts the store while its files look unchanged
    features = features_path(_a_shard(store_copy))
    before = features.stat()
    data = bytearray(features.read_bytes())
    data[len(data) // 2] ^= 0xFF  # the same size, one float changed: a NaN or garbage in training
    features.write_bytes(bytes(data))
    os.utime(features, ns=(before.st_atime_ns, before.st_mtime_ns))  # the modification time set back
    for _ in range(100):  # a coarse clock may still be in the tick of the stamp
        if features.stat().st_ctime_ns != before.st_ctime_ns:
            break
        time.sleep(0.01)
        os.utime(features, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = features.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    with pytest.raises(InputError) as refused:
        _linear_run(store_copy, tmp_path / "run")
    assert str(refused.value) == f"{features}: checksum mismatch (truncated or altered since it was prepared)"
    assert not (tmp_path / "run" / "result.json").exists()


def test_a_missing_shard_is_prepared_again_on_resume(small_corpus, mini_workload, tmp_path):
    out = tmp_path / "store"
    data = mini_workload.data
    arguments = (small_corpus, {"train": data.train, "dev": data.dev}, mini_workload.features, mini_workload.model,
                 data.max_duration, out)
    prepare_store(*arguments)
    shard = _a_shard(out)
    features_path(shard).unlink()
    assert verify_store(out) == [f"{features_path(shard)}: shard file missing"]
    prepare_store(*arguments)  # the sidecar exists, but its shard no longer matches it
    assert verify_store(out) == []


def test_resuming_into_a_store_of_another_corpus_or_settings_is_refused(small_corpus, mini_workload, tmp_path):
    out = tmp_path / "store"
    data = mini_workload.data
    subsets = {"train": ("dev-clean",)}
    prepare_store(small_corpus, subsets, mini_workload.features, mini_workload.model, data.max_duration, out)
    other_features = mini_workload.features.model_copy(update={"mel_bands": 40})
    with pytest.raises(InputError, match=r"already holds features of another corpus or other settings \(features"):
        prepare_store(small_corpus, subsets, other_features, mini_workload.model, data.max_duration, out)


def test_an_audio_file_no_transcript_names_is_reported(small_corpus, mini_workload, tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(small_corpus / "dev-clean", corpus / "dev-clean")
    stray = sorted(corpus.glob("dev-clean/*/*/*.flac"))[0]
    shutil.copy(stray, stray.with_name("9999-0-0001.flac"))
    out = tmp_path / "store"
    prepare_store(corpus, {"train": ("dev-clean",)}, mini_workload.features, mini_workload.model, 16.7, out)
    problems = json.loads((out / "report.json").read_text())["dev-clean"]["problems"]
    assert {"file": str(stray.with_name("9999-0-0001.flac")),
            "reason": "audio file not named in any transcript"} in problems


def test_features_of_another_dimension_are_refused_before_the_clock(small_store, tmp_path, monkeypatch):
    from benchbase.data.store import FeatureStore as Store

    monkeypatch.setattr(Store, "feature_dimension", property(lambda self: 80))
    with pytest.raises(InputError, match="features have 80 dimensions, workload 'ds2-mini' expects 93"):
        _linear_run(small_store, tmp_path / "run")


def test_flipped_bytes_in_an_index_are_found(store_copy):
    index = _a_shard(store_copy)
    data = bytearray(index.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte, same size, same name
    index.write_bytes(bytes(data))
    assert verify_store(store_copy) == [f"{index}: checksum mismatch (truncated or altered since it was prepared)"]


def test_resuming_into_a_store_of_another_corpus_is_refused(small_corpus, mini_workload, tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(small_corpus / "dev-clean", corpus / "dev-clean")
    out, subsets = tmp_path / "store", {"train": ("dev-clean",)}
    arguments = (mini_workload.features, mini_workload.model, 16.7, out)
    prepare_store(corpus, subsets, *arguments)
    transcript = sorted(corpus.glob("dev-clean/*/*/*.trans.txt"))[0]
    transcript.write_text(transcript.read_text().replace(" ", " A ", 1))  # another corpus: one word more
    with pytest.raises(InputError, match=r"another corpus or other settings \(files_sha256 differ\)"):
        prepare_store(corpus, subsets, *arguments)

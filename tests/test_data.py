from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import soundfile

from benchbase.data.features import extract_features
from benchbase.data.pipeline import BatchPipeline
from benchbase.data.prepare import prepare_store
from benchbase.data.store import SHARD_SIZE, FeatureStore, read_shard
from benchbase.specs import FeatureSpec


def test_features_are_80_log_mel_plus_13_mfcc_per_10_ms(small_corpus):
    audio, rate = soundfile.read(next(small_corpus.glob("train/*/*/*.flac")), dtype="float32")
    features = extract_features(audio, FeatureSpec())
    assert rate == 16000
    assert features.shape == (1 + (len(audio) - 512) // 160, 93)
    assert features.dtype == np.float32 and np.isfinite(features).all()


def test_store_has_shards_of_64_and_training_statistics(small_store, small_corpus):
    store = FeatureStore(small_store)
    description = store.description["splits"]
    listed = len(list((small_corpus / "train").glob("*/*/*.flac")))
    assert description["train"]["utterances"] + sum(description["train"]["dropped"].values()) == listed
    first = read_shard(store.shards(["train"])[0])
    assert len(first) == SHARD_SIZE
    normalized = np.concatenate([u.features for s in store.shards(["train"]) for u in store.read(s)])
    assert np.allclose(normalized.mean(axis=0), 0, atol=0.05) and np.allclose(normalized.std(axis=0), 1, atol=0.05)


def test_pipeline_is_deterministic_per_seed_and_pads_right(small_store):
    store = FeatureStore(small_store)

    def ids(seed, epoch, readers):
        pipeline = BatchPipeline(store, ("train",), 16, readers=readers, shuffle_buffer=64, seed=seed)
        return [batch.utterance_ids for batch in pipeline.epoch(epoch)]

    assert ids(0, 1, readers=1) == ids(0, 1, readers=3)
    assert ids(0, 1, 2) != ids(0, 2, 2) and ids(0, 1, 2) != ids(1, 1, 2)
    batch = next(iter(BatchPipeline(store, ("train",), 8, seed=0).epoch(0)))
    shortest = int(batch.feature_lengths.argmin())
    assert batch.features.shape[1] == batch.feature_lengths.max()
    assert not batch.features[shortest, batch.feature_lengths[shortest]:].any()
    assert (batch.labels[np.arange(8), batch.label_lengths - 1] != 0).all()


def test_pipeline_covers_every_utterance_once_per_epoch(small_store):
    store = FeatureStore(small_store)
    pipeline = BatchPipeline(store, ("train",), 10, shuffle_buffer=32, drop_last=False, seed=3)
    seen = [i for batch in pipeline.epoch(0) for i in batch.utterance_ids]
    assert len(seen) == len(set(seen)) == store.utterance_count(["train"])
    assert len(pipeline) == -(-len(seen) // 10)


def test_prepare_drops_and_counts_long_short_corrupt_and_unknown(tmp_path, small_corpus, mini_workload):
    corpus = tmp_path / "corpus"
    shutil.copytree(small_corpus / "dev", corpus / "dev")
    victim = sorted(corpus.glob("dev/*/*/*.flac"))[0]
    victim.write_bytes(b"not a flac file")
    transcript = next(corpus.glob("dev/*/*/*.trans.txt"))
    lines = transcript.read_text().splitlines()
    lines[-1] = lines[-1] + " 42"
    transcript.write_text("\n".join(lines) + "\n")
    out = tmp_path / "store"
    description = prepare_store(corpus, {"train": ("dev",)}, mini_workload.features, mini_workload.model,
                                max_duration=3.0, out=out)
    dev = description["splits"]["dev"]
    assert dev["dropped"]["unreadable_audio"] == 1 and dev["dropped"]["bad_transcript"] == 1
    assert dev["dropped"].get("too_long", 0) > 0
    assert any(victim.name in path and "unreadable audio" in reason for path, reason in dev["problems"])
    assert json.loads((out / "store.json").read_text())["splits"]["dev"] == dev


def test_prepare_resumes_from_finished_shards(tmp_path, small_corpus, mini_workload):
    args = ({"train": ("dev",)}, mini_workload.features, mini_workload.model, 16.7)
    first = prepare_store(small_corpus, *args, out=tmp_path / "a")
    shard = tmp_path / "a" / first["splits"]["dev"]["shards"][0]
    stamp = shard.stat().st_mtime_ns
    (tmp_path / "a" / "store.json").unlink()
    calls = []
    again = prepare_store(small_corpus, *args, out=tmp_path / "a", progress=lambda done, total: calls.append(done))
    assert again == first and shard.stat().st_mtime_ns == stamp
    assert calls[0] == len(first["splits"]["dev"]["shards"])  # everything was already done


def test_a_missing_subset_is_a_clear_error(tmp_path, small_corpus, mini_workload):
    from benchbase.errors import InputError

    with pytest.raises(InputError, match="dev-other: subset folder not found"):
        prepare_store(small_corpus, {"train": ("dev-other",)}, mini_workload.features, mini_workload.model, 16.7,
                      tmp_path / "x")

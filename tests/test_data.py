from __future__ import annotations

import json
import shutil
from pathlib import Path

import librosa
import numpy as np
import pytest
import soundfile
from cli_helpers import benchbase_in_process

from benchbase.data.features import extract_features
from benchbase.data.pipeline import BatchPipeline, bucketed_plan
from benchbase.data.prepare import prepare_store
from benchbase.data.store import SHARD_SIZE, FeatureStore, read_shard
from benchbase.plugin_host.builtins.workloads import builtin_workload
from benchbase.specs import FeatureSpec

MINI_MODEL = builtin_workload("ds2-mini").model


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
        pipeline = BatchPipeline(store, ("train",), 16, readers=readers, shuffle_buffer=64, model=MINI_MODEL, seed=seed)
        return [batch.utterance_ids for batch in pipeline.epoch(epoch)]

    assert ids(0, 1, readers=1) == ids(0, 1, readers=3)
    assert ids(0, 1, 2) != ids(0, 2, 2) and ids(0, 1, 2) != ids(1, 1, 2)
    batch = next(iter(BatchPipeline(store, ("train",), 8, model=MINI_MODEL, seed=0).epoch(0)))
    shortest = int(batch.feature_lengths.argmin())
    assert batch.features.shape[1] == batch.feature_lengths.max()
    assert not batch.features[shortest, batch.feature_lengths[shortest]:].any()
    assert (batch.labels[np.arange(8), batch.label_lengths - 1] != 0).all()


def test_pipeline_covers_every_utterance_once_per_epoch(small_store):
    store = FeatureStore(small_store)
    pipeline = BatchPipeline(store, ("train",), 10, shuffle_buffer=32, drop_last=False, model=MINI_MODEL, seed=3)
    seen = [i for batch in pipeline.epoch(0) for i in batch.utterance_ids]
    assert len(seen) == len(set(seen)) == store.utterance_count(["train"])
    assert len(pipeline) == -(-len(seen) // 10)


def _plant_faults(corpus) -> dict[str, object]:
    """Plant one of each fault the issue names into a copy of a real synthetic subset."""
    flacs = sorted(corpus.glob("dev-clean/*/*/*.flac"))
    truncated, missing, resampled = flacs[0], flacs[1], flacs[2]
    truncated.write_bytes(truncated.read_bytes()[:300])
    missing.unlink()
    audio, rate = soundfile.read(resampled)
    soundfile.write(resampled, librosa.resample(audio, orig_sr=rate, target_sr=22050), 22050)
    transcript = sorted(corpus.glob("dev-clean/*/*/*.trans.txt"))[-1]
    lines = transcript.read_text().splitlines()
    lines[-1] += " 42"  # a character outside the alphabet
    lines[-2] = lines[-2].split(" ")[0]  # an id with an empty transcript
    lines.append("this line is not an utterance id and text")  # malformed: names no audio file
    transcript.write_text("\n".join(lines) + "\n")
    return {"truncated": truncated, "missing": missing, "transcript": transcript}


def test_prepare_skips_and_reports_every_planted_fault(tmp_path, small_corpus, mini_workload):
    corpus = tmp_path / "corpus"
    shutil.copytree(small_corpus / "dev-clean", corpus / "dev-clean")
    planted = _plant_faults(corpus)
    out = tmp_path / "store"
    description = prepare_store(corpus, {"train": ("dev-clean",)}, mini_workload.features, mini_workload.model,
                                max_duration=2.2, out=out)
    dev = description["splits"]["dev-clean"]
    assert dev["dropped"]["unreadable_audio"] == 1 and dev["dropped"]["bad_transcript"] == 1
    assert dev["dropped"]["missing_audio"] == 2  # the deleted file and the malformed line's
    assert dev["dropped"]["empty_transcript"] == 1 and dev["utterances"] + sum(dev["dropped"].values()) == dev["listed"]
    assert dev["dropped"].get("too_long", 0) > 0 and dev["resampled"] == 1
    report = json.loads((out / "report.json").read_text())["dev-clean"]
    reasons = {(Path(p["file"]).name, p["reason"].split(":")[0]) for p in report["problems"]}
    assert (planted["truncated"].name, "unreadable audio") in reasons
    assert (planted["missing"].name, "audio file named in the transcript does not exist") in reasons
    assert any(name.startswith(planted["transcript"].name) and "no transcript" in reason for name, reason in reasons)
    assert any("'4' is not in the alphabet" in p["reason"] for p in report["problems"])
    assert abs(report["kept_fraction"] - dev["utterances"] / dev["listed"]) <= 0.5e-5 + 1e-12  # rounded to 5 decimals


def test_an_undecodable_transcript_line_costs_its_utterance_alone_and_is_counted(capsys, tmp_path, small_corpus):
    """Two Latin-1 lines in a chapter's transcript: the chapter's other utterances are kept, and the
    summary on the console and in report.json counts the two as dropped, with why."""
    corpus = tmp_path / "corpus"
    shutil.copytree(small_corpus / "dev-clean", corpus / "dev-clean")
    transcript = max(corpus.glob("dev-clean/*/*/*.trans.txt"), key=lambda path: len(path.read_bytes().splitlines()))
    lines = transcript.read_bytes().splitlines()
    assert len(lines) >= 4
    for index in (1, 2):
        utterance_id, text = lines[index].split(b" ", 1)
        lines[index] = utterance_id + b" " + "CAFÉ".encode("latin-1") + b" " + text
    transcript.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "store"
    code, said, err = benchbase_in_process(capsys, "data", "prepare", "--librispeech", str(corpus), "--workload",
                                           "ds2-mini", "--subsets", "dev-clean", "--train", "dev-clean", "--out",
                                           str(out), "--workers", "1")
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())["dev-clean"]
    assert report["dropped"]["undecodable_transcript"] == 2
    assert report["utterances"] + sum(report["dropped"].values()) == report["listed"]
    assert report["listed"] == len(list(corpus.glob("dev-clean/*/*/*.flac")))
    undecodable = [p for p in report["problems"] if "not UTF-8" in p["reason"]]
    assert [p["file"] for p in undecodable] == [f"{transcript}:2", f"{transcript}:3"]
    chapter = transcript.name.removesuffix(".trans.txt")
    kept = [json.loads(line)["id"] for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert any(utterance_id.startswith(chapter + "-") for utterance_id in kept)  # the chapter's good lines
    summary = " ".join(said.split())  # the console's line, unwrapped
    assert (f"dev-clean: kept {report['utterances']} of {report['listed']} "
            f"({100 * report['kept_fraction']:.1f}%)") in summary
    assert "undecodable_transcript 2" in summary


def test_manifest_lists_every_kept_utterance_with_its_place(small_store):
    store = FeatureStore(small_store)
    rows = [json.loads(line) for line in (small_store / "manifest.jsonl").read_text().splitlines()]
    subsets = ("train", "dev-clean", "dev-other", "test-clean", "test-other")
    assert len(rows) == sum(store.utterance_count([name]) for name in subsets)
    row = rows[5]
    (utterance,) = store.read_utterances([(small_store / row["shard"], row["offset"])])
    assert utterance.utterance_id == row["id"] and utterance.transcript == row["transcript"]
    assert utterance.features.shape[0] == row["frames"] and row["speaker"] == row["id"].split("-")[0]


def test_a_killed_preparation_resumes_and_finishes_the_rest(tmp_path, small_corpus, mini_workload):
    args = ({"train": ("train",)}, mini_workload.features, mini_workload.model, 16.7)
    out = tmp_path / "store"

    def killed_after_the_first_shard(done, total):
        if done > 0:
            raise KeyboardInterrupt  # what Ctrl-C midway looks like to the preparation

    with pytest.raises(KeyboardInterrupt):
        prepare_store(small_corpus, *args, out=out, workers=1, progress=killed_after_the_first_shard)
    assert not (out / "store.json").exists()
    finished_before = sorted(out.glob("train/*.json"))
    assert finished_before and len(finished_before) < len(sorted(out.glob("train/*.npz"))) + 1
    stamps = {path: path.stat().st_mtime_ns for path in finished_before}
    calls = []
    description = prepare_store(small_corpus, *args, out=out, progress=lambda done, total: calls.append((done, total)))
    assert all(path.stat().st_mtime_ns == stamp for path, stamp in stamps.items())  # not redone
    assert 0 < calls[0][0] < calls[0][1]  # resumed partway
    fresh = prepare_store(small_corpus, *args, out=tmp_path / "fresh")
    assert description["splits"] == fresh["splits"]
    assert (out / "stats.npz").read_bytes() == (tmp_path / "fresh" / "stats.npz").read_bytes()


def test_a_missing_subset_is_a_clear_error(tmp_path, small_corpus, mini_workload):
    from benchbase.errors import InputError

    with pytest.raises(InputError, match="train-other-500: subset folder not found"):
        prepare_store(small_corpus, {"train": ("train-other-500",)}, mini_workload.features, mini_workload.model, 16.7,
                      tmp_path / "x")


def test_bucketing_batches_similar_lengths_and_covers_the_split(small_store):
    store = FeatureStore(small_store)
    pipeline = BatchPipeline(store, ("train",), 16, length_buckets=4, model=MINI_MODEL, seed=5)
    batches = list(pipeline.epoch(0))
    spreads = [int(b.feature_lengths.max() - b.feature_lengths.min()) for b in batches]
    streamed = [int(b.feature_lengths.max() - b.feature_lengths.min())
                for b in BatchPipeline(store, ("train",), 16, model=MINI_MODEL, seed=5).epoch(0)]
    assert np.median(spreads) < np.median(streamed)
    ids = [i for b in batches for i in b.utterance_ids]
    assert len(ids) == len(set(ids)) == len(pipeline) * 16
    assert [b.utterance_ids for b in pipeline.epoch(0)] == [b.utterance_ids for b in batches]


def test_a_split_too_small_for_its_buckets_is_cut_into_fewer_not_into_none(small_store):
    store = FeatureStore(small_store)
    utterances = store.utterance_count(("train",))
    batch = utterances // 3  # three batches' worth of utterances, asked for in six buckets
    pipeline = BatchPipeline(store, ("train",), batch, length_buckets=6, model=MINI_MODEL, seed=5)
    batches = list(pipeline.epoch(0))
    assert len(batches) == len(pipeline) == 3
    assert all(len(b.utterance_ids) == batch for b in batches)


def test_bucketed_plan_keeps_every_index_once():
    rng = np.random.default_rng(0)
    plan = bucketed_plan(np.arange(100)[::-1], buckets=5, batch_size=8, drop_last=False, rng=rng)
    assert sorted(np.concatenate(plan).tolist()) == list(range(100))
    assert all(np.ptp(batch) < 20 for batch in plan)  # a batch never leaves its bucket of 20


def test_fixed_padding_pads_every_batch_to_the_same_frames(small_store):
    store = FeatureStore(small_store)
    batches = list(BatchPipeline(store, ("dev-clean",), 8, model=MINI_MODEL, shuffle=False, drop_last=False,
                                 pad_to_frames=1670).epoch(0))
    assert {b.features.shape[1] for b in batches} == {1670}


def test_a_store_of_another_format_is_refused_with_a_way_out(tmp_path, small_store):
    from benchbase.errors import InputError

    copy = tmp_path / "old"
    shutil.copytree(small_store, copy)
    description = json.loads((copy / "store.json").read_text())
    (copy / "store.json").write_text(json.dumps({**description, "version": 1}))
    with pytest.raises(InputError, match="format 1, this benchbase reads 3; prepare it again"):
        FeatureStore(copy)


@pytest.mark.parametrize("kind", ["streamed", "bucketed", "evaluation", "padded"])
def test_batch_shapes_are_the_shapes_of_the_batches_an_epoch_yields(small_store, kind):
    """What a backend's warm_up() is told before run_start: computed from the shards' indexes by the
    same code that cuts the batches, so it is every batch's shape, in order, for any seed and epoch."""
    store = FeatureStore(small_store)
    options = {"streamed": dict(subsets=("train",), shuffle_buffer=32),
               "bucketed": dict(subsets=("train",), length_buckets=3),
               "evaluation": dict(subsets=("dev-clean",), shuffle=False, drop_last=False),
               "padded": dict(subsets=("train",), pad_to_frames=1670)}[kind]
    subsets = options.pop("subsets")
    pipeline = BatchPipeline(store, subsets, 12, model=MINI_MODEL, seed=4, **options)
    for epoch in (1, 2):
        shapes = pipeline.batch_shapes(epoch)
        batches = [(b.size, b.features.shape[1], b.labels.shape[1]) for b in pipeline.epoch(epoch)]
        assert [(s.rows, s.frames, s.label_length) for s in shapes] == batches
    assert len({(s.frames, s.label_length) for s in shapes}) > 1  # the shapes do differ from batch to batch

from __future__ import annotations

import numpy as np
import pytest

from benchbase.data.alphabet import SYMBOLS, UnknownCharacterError, decode_labels, encode_transcript
from benchbase.decode import greedy_decode
from benchbase.metrics import TargetTracker, error_rates
from benchbase.specs import TTARule


def test_doubled_letters_get_the_separator_and_decode_back():
    labels = encode_transcript("Cool  BOOK it's")
    assert "".join(SYMBOLS[i] for i in labels) == "co_ol bo_ok it's"
    assert decode_labels(labels) == "cool book it's"


def test_unknown_characters_are_refused_by_name():
    with pytest.raises(UnknownCharacterError, match="'7'"):
        encode_transcript("route 7")


def _one_hot_path(path: list[int], symbols: int = 30) -> np.ndarray:
    log_probs = np.full((len(path), symbols), -10.0, dtype=np.float32)
    log_probs[np.arange(len(path)), path] = 0.0
    return log_probs


def test_greedy_merges_repeats_drops_blanks_and_honours_lengths():
    c, o, sep, l_ = SYMBOLS.index("c"), SYMBOLS.index("o"), SYMBOLS.index("_"), SYMBOLS.index("l")
    path = [c, c, 0, o, sep, o, o, 0, l_, c, c]
    batch = np.stack([_one_hot_path(path)])
    assert greedy_decode(batch, np.array([9])) == ["cool"]
    assert greedy_decode(batch, np.array([11])) == ["coolc"]


def test_error_rates_match_hand_counts():
    rates = error_rates(["hello world", "a b"], ["hello word", ""])
    assert rates.wer == pytest.approx(100 * 3 / 4)  # 1 substitution + 2 deletions of 4 words
    assert rates.cer == pytest.approx(100 * 4 / 14)  # 1 deletion + 3 deletions of 14 characters
    assert rates.paper_cer == pytest.approx(100 * (1 / 11 + 3 / 3) / 2)


def test_tta_uses_the_median_of_the_last_e_evaluations():
    tracker = TargetTracker(TTARule(targets=[{"metric": "cer", "value": 30}, {"metric": "wer", "value": 50}], window=3))
    assert tracker.update(1, 10.0, {"wer": 90, "cer": 20}) == []  # fewer than e evaluations: no median yet
    assert tracker.update(2, 20.0, {"wer": 80, "cer": 40}) == []
    assert [t.label for t in tracker.update(3, 30.0, {"wer": 40, "cer": 25})] == ["CER/ref 30"]  # median(20, 40, 25)
    assert [t.label for t in tracker.update(4, 40.0, {"wer": 45, "cer": 90})] == ["WER 50"]  # median(80, 40, 45) = 45
    assert tracker.reached == {"CER/ref 30": 30.0, "WER 50": 40.0}
    assert tracker.aggregate("cer") == 40  # a later bad evaluation does not un-reach a target


def test_a_paper_cer_target_is_judged_on_the_papers_cer_not_jiwers():
    # The two CERs differ most when hypotheses are longer than references (insertions).
    tracker = TargetTracker(TTARule(targets=[{"metric": "paper_cer", "value": 10}], window=1))
    assert tracker.update(1, 5.0, {"wer": 50, "cer": 8, "paper_cer": 12}) == []
    assert [t.label for t in tracker.update(2, 9.0, {"wer": 50, "cer": 14, "paper_cer": 9})] == ["CER 10"]
    assert tracker.reached == {"CER 10": 9.0}


def test_tta_reaches_a_target_once_and_keeps_its_first_time():
    tracker = TargetTracker(TTARule(targets=[{"metric": "wer", "value": 50}], window=1))
    tracker.update(1, 5.0, {"wer": 49, "cer": 0})
    tracker.update(2, 9.0, {"wer": 10, "cer": 0})
    assert tracker.reached == {"WER 50": 5.0} and tracker.all_reached

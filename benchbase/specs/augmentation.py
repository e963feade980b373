"""SpecAugmentSpec: the masks the harness draws over each training batch (Park et al. 2019).

The defaults are MLCommons AlgoPerf's Conformer and DeepSpeech workloads (librispeech_conformer's
``spectrum_augmenter``): 2 frequency masks of up to 27 bins, 10 time masks whose widest is 5% of
the utterance (its ``use_dynamic_time_mask_max_frames``, which sets aside its 40-frame bound),
masked features set to 0. ``benchbase.data.augmentation`` draws and applies them.
"""

from __future__ import annotations

from pydantic import Field

from benchbase.specs._base import Spec

__all__ = ["SpecAugmentSpec"]


class SpecAugmentSpec(Spec):
    frequency_masks: int = Field(2, ge=0, le=64, description="Frequency masks per utterance (AlgoPerf: 2).")
    frequency_mask_max_bins: int = Field(
        27, ge=0, le=1024, description="A frequency mask's width is drawn uniformly below this many feature bins "
        "(AlgoPerf: 27), at most the frame's features. The masks range over every feature of a frame, as "
        "AlgoPerf's over its 80 log-mel bins.")
    time_masks: int = Field(10, ge=0, le=1024, description="Time masks per utterance (AlgoPerf: 10).")
    time_mask_max_frames: int | None = Field(
        None, ge=0, le=100_000, description="A time mask's width is drawn uniformly below this many frames, then "
        "capped at time_mask_max_ratio of the utterance's frames. None: drawn below that cap itself, which grows "
        "with the utterance (AlgoPerf's use_dynamic_time_mask_max_frames, the Conformer's setting).")
    time_mask_max_ratio: float = Field(
        0.05, gt=0.0, le=1.0, description="The widest time mask, as a fraction of the utterance's own frames "
        "(at least one frame; AlgoPerf: 0.05).")
    mask_value: float = Field(
        0.0, ge=-1000.0, le=1000.0, description="What a masked feature becomes. Features are normalized with the "
        "training split's statistics, so 0 is its mean (AlgoPerf: 0).")

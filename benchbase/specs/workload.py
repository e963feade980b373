"""WorkloadSpec: everything that defines what is trained and how it is scored.

Every hyperparameter whose default differs between TensorFlow and PyTorch is a field here,
so that no backend ever falls back on its framework's default (docs/design.md).
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BeforeValidator, Field, SerializeAsAny, model_validator

from benchbase.specs._base import Spec
from benchbase.specs.augmentation import SpecAugmentSpec
from benchbase.specs.model import ModelSpec, QuantizationSpec, validate_model
from benchbase.specs.optimizer import AdaDeltaSpec, OptimizerSpec, validate_optimizer
from benchbase.specs.tta import TTARule
from benchbase.specs.vocabulary import CharactersSpec, TokensSpec

__all__ = [
    "BEAM_DECODERS",
    "DECODER_NAMES",
    "DataSpec",
    "DecoderName",
    "Deviation",
    "EvalSpec",
    "FeatureSpec",
    "QuantizationSpec",  # the backends import it from here (plugins/*/quantization.py)
    "WorkloadSpec",
]

# A workload's model and optimizer are each one of several spec classes, picked by a key of the
# mapping (``model.family``, ``optimizer.name``), and written back with every field of the class
# picked (SerializeAsAny), not only the base class's.
FamilyModel = Annotated[SerializeAsAny[ModelSpec], BeforeValidator(validate_model)]
NamedOptimizer = Annotated[SerializeAsAny[OptimizerSpec], BeforeValidator(validate_optimizer)]


DecoderName = Literal["greedy", "beam", "word_beam"]
"""The one list of decoder names: the spec validates with it, the decoder factory and the CLI read it."""
DECODER_NAMES: tuple[str, ...] = get_args(DecoderName)
BEAM_DECODERS: tuple[str, ...] = tuple(name for name in DECODER_NAMES if name != "greedy")

class FeatureSpec(Spec):
    sample_rate: int = Field(16000, ge=8000, le=48000, description="Audio sample rate in Hz.")
    window: int = Field(512, ge=64, le=4096, description="STFT window (and FFT) size in samples.")
    hop: int = Field(160, ge=16, le=2048, description="Frame shift in samples (160 = 10 ms).")
    mel_bands: int = Field(80, ge=1, le=256, description="Number of log-mel bands.")
    mfcc: int = Field(13, ge=0, le=80, description="Number of MFCCs appended to the log-mel bands.")

    @property
    def dimension(self) -> int:
        """Features per frame: log-mel bands followed by MFCCs."""
        return self.mel_bands + self.mfcc


class DataSpec(Spec):
    dataset: Literal["synthetic", "librispeech"] = Field(description="Where the audio comes from.")
    train: tuple[str, ...] = Field(min_length=1, description="Subsets (LibriSpeech folder names) used for training.")
    dev: tuple[str, ...] = Field(min_length=1, description="Subsets evaluated every epoch, each on its own "
                                 "(never pooled); the TTA rule names the one it is scored on.")
    test: tuple[str, ...] = Field((), description="Subsets evaluated only once, after run_stop (untimed), "
                                  "beside every dev subset.")
    max_duration: float = Field(
        16.7, gt=0.0, le=120.0, description="Utterances longer than this (seconds) are dropped."
    )
    synthetic_utterances: int = Field(
        3000, ge=10, le=1_000_000, description="Corpus size when the dataset is synthesized."
    )
    length_buckets: int = Field(
        0,
        ge=0,
        le=10_000,
        description="0: a shuffle buffer over shards. N > 0: sort the split by length into N buckets, "
        "batch within buckets, shuffle within buckets and across batches (as MLPerf's RNN-T reference); "
        "fewer buckets where the split holds less than one global batch per bucket.",
    )
    pad_to_frames: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="Pad every batch to this many frames (the paper: 1670), or None: to the batch's longest.",
    )
    tokens: TokensSpec = Field(
        default_factory=CharactersSpec,
        description="What the model predicts: characters (benchbase's alphabet) or sentencepiece pieces trained "
        "on the training transcripts at prepare time; the model's symbols must be as many.")


class EvalSpec(Spec):
    every_epochs: int = Field(1, ge=1, le=100, description="Evaluate on the dev split every this many epochs.")
    decoder: DecoderName = Field(
        "greedy", description="Decoder used for evaluation: greedy (best path), beam (prefix beam search) or "
        "word_beam (word beam search over the training transcripts' dictionary, the paper's).")
    beam_width: int = Field(1, ge=1, le=8192, description="Beam width of the evaluation decoder.")
    lm_mode: Literal["words", "bigrams"] = Field(
        "bigrams", description="Word beam search's language model: words (unigram) or bigrams.")
    lm_alpha: float = Field(0.5, ge=0.0, le=10.0, description="Weight of the language model's log-probability "
                            "in word beam search (shallow fusion).")
    lm_beta: float = Field(0.0, ge=-20.0, le=20.0, description="Score added per word in word beam search.")
    final_decoder: DecoderName | None = Field(
        None, description="Decoder of the final evaluation after run_stop (the paper's Table 5: word_beam); "
        "none: the evaluation decoder.")
    final_beam_width: int | None = Field(
        None, ge=1, le=8192, description="Beam width of the final evaluation (the paper's Table 5: 512); none: "
        "the evaluation beam width.")
    log_sentences_every: int = Field(
        50, ge=1, le=100_000, description="Greedy-decode training sentences every N batches."
    )
    checkpoint_every: int = Field(250, ge=1, le=1_000_000, description="Write a checkpoint every N batches.")
    independent_utterances: int = Field(
        8, ge=0, le=100_000, description="Independent scoring: after each evaluation, off the clock, benchbase's "
        "reference model re-scores this many utterances of the scored subset (a sample the backend cannot "
        "know in advance) from the backend's exported weights, and predict() must agree with it. 0: off, "
        "which puts a run in the open division (for a backend whose model is not the workload's).")
    independent_final_utterances: int | None = Field(
        None, ge=1, le=1_000_000, description="Independent scoring at the final evaluation: utterances of the "
        "scored subset re-scored; none: all of them.")


class Deviation(Spec):
    """One way a workload departs from its reference (or a choice the reference leaves open)."""

    field: str = Field(min_length=1, max_length=120, description="Dotted spec field, or a topic where no field is.")
    reference: str = Field(max_length=300, description="What the reference does (or 'not stated').")
    benchbase: str = Field(min_length=1, max_length=300, description="What this workload does instead.")
    why: str = Field(min_length=1, max_length=1000, description="Why, and what evidence supports the choice.")


class WorkloadSpec(Spec):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_.-]*$", description="Workload name.")
    description: str = Field("", max_length=500, description="One line for `benchbase workloads`.")
    model: FamilyModel = Field(description="Acoustic model: its family's spec (``family``, ds2 when absent).")
    features: FeatureSpec = Field(default_factory=FeatureSpec, description="Feature extraction.")
    data: DataSpec = Field(description="Dataset, splits and filters.")
    augmentation: SpecAugmentSpec | None = Field(
        None, description="SpecAugment masks the harness draws from the run's seed over every training batch "
        "before a backend sees it (evaluation batches never); None: off.")
    optimizer: NamedOptimizer = Field(default_factory=AdaDeltaSpec,
                                      description="Optimizer and its pinned settings (``name``, adadelta when absent).")
    evaluation: EvalSpec = Field(default_factory=EvalSpec, description="Evaluation cadence and decoder.")
    tta: TTARule = Field(description="Time-to-accuracy targets and window.")
    max_epochs: int = Field(ge=1, le=10_000, description="Stop (status aborted) after this many epochs.")
    max_minutes: float = Field(
        ge=0.01, le=100_000.0, description="Stop (status aborted) after this many minutes on the run clock."
    )
    reference: str = Field("", max_length=300, description="What the workload reproduces (a paper, a benchmark).")
    deviations: tuple[Deviation, ...] = Field(
        (), max_length=64, description="Every way the workload departs from its reference, declared.")

    @property
    def scored_subset(self) -> str:
        """The dev subset TTA is scored on."""
        return self.tta.subset or self.data.dev[0]

    @model_validator(mode="after")
    def _tta_subset_is_a_dev_subset(self) -> WorkloadSpec:
        subset, dev = self.tta.subset, self.data.dev
        if subset is None and len(dev) > 1:
            raise ValueError(f"tta.subset must name the dev subset the targets are scored on, one of {list(dev)}")
        if subset is not None and subset not in dev:
            raise ValueError(f"tta.subset {subset!r} is not a dev subset ({', '.join(dev)})")
        if len(set(dev + self.data.test)) != len(dev) + len(self.data.test):
            raise ValueError(f"dev and test subsets repeat: {list(dev + self.data.test)}")
        return self

    @model_validator(mode="after")
    def _decoders_fit_the_family(self) -> WorkloadSpec:
        known = self.model.evaluation_decoders
        chosen = {self.evaluation.decoder, self.evaluation.final_decoder or self.evaluation.decoder}
        if known is not None and not chosen <= set(known):
            raise ValueError(f"evaluation decoder {', '.join(sorted(chosen - set(known)))} cannot decode the "
                             f"{self.model.family} family's outputs (it decodes with {', '.join(known)})")
        return self

    @model_validator(mode="after")
    def _the_model_predicts_the_vocabulary(self) -> WorkloadSpec:
        tokens = self.data.tokens
        if self.model.symbols != tokens.symbols:
            raise ValueError(f"model.symbols is {self.model.symbols}, but data.tokens ({tokens.kind}) has "
                             f"{tokens.symbols} symbols with the blank")
        chosen = {self.evaluation.decoder, self.evaluation.final_decoder or self.evaluation.decoder}
        if tokens.kind != "characters" and chosen != {"greedy"}:
            # Prefix and word beam search spell characters (and word beam search's dictionary is a
            # character tree); over pieces they would score another search than the one documented.
            raise ValueError(f"evaluation decoder {', '.join(sorted(chosen - {'greedy'}))} searches over characters; "
                             f"a {tokens.kind} vocabulary decodes greedily")
        return self

    @model_validator(mode="after")
    def _padding_holds_the_longest_utterance(self) -> WorkloadSpec:
        pad_to = self.data.pad_to_frames
        longest = (int(self.data.max_duration * self.features.sample_rate - self.features.window)
                   // self.features.hop + 1)
        if pad_to is not None and pad_to < longest:
            raise ValueError(f"data.pad_to_frames {pad_to} is shorter than a {self.data.max_duration} s utterance "
                             f"({longest} frames)")
        return self

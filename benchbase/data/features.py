"""Acoustic features: 80 log-mel bands + 13 MFCCs per 10 ms frame (librosa).

The MFCCs are the DCT of the same log-mel spectrum, so the mel filter bank runs once per
utterance.
"""

from __future__ import annotations

import librosa
import numpy as np

from benchbase.specs import FeatureSpec

__all__ = ["extract_features"]


def extract_features(audio: np.ndarray, spec: FeatureSpec) -> np.ndarray:
    """Mono float audio at spec.sample_rate -> float32 (frames, spec.dimension)."""
    mel_power = librosa.feature.melspectrogram(
        y=audio.astype(np.float32, copy=False),
        sr=spec.sample_rate,
        n_fft=spec.window,
        win_length=spec.window,
        hop_length=spec.hop,
        n_mels=spec.mel_bands,
        center=False,
    )
    log_mel = librosa.power_to_db(mel_power, ref=1.0, amin=1e-10, top_db=None)
    parts = [log_mel]
    if spec.mfcc:
        parts.append(librosa.feature.mfcc(S=log_mel, n_mfcc=spec.mfcc))
    return np.concatenate(parts, axis=0).T.astype(np.float32)

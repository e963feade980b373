"""Acoustic features: 80 log-mel bands + 13 MFCCs per 10 ms frame (librosa).

The MFCCs are the DCT of the same log-mel spectrum, so the mel filter bank runs once per
utterance. The filter bank itself is built once per feature spec: librosa would rebuild it
on every melspectrogram call.
"""

from __future__ import annotations

from functools import lru_cache

import librosa
import numpy as np

from benchbase.specs import FeatureSpec

__all__ = ["extract_features"]


def extract_features(audio: np.ndarray, spec: FeatureSpec) -> np.ndarray:
    """Mono float audio at spec.sample_rate -> float32 (frames, spec.dimension)."""
    spectrum = librosa.stft(audio.astype(np.float32, copy=False), n_fft=spec.window, hop_length=spec.hop,
                            win_length=spec.window, center=False)
    mel_power = _mel_basis(spec) @ (np.abs(spectrum) ** 2)
    log_mel = librosa.power_to_db(mel_power, ref=1.0, amin=1e-10, top_db=None)
    parts = [log_mel]
    if spec.mfcc:
        parts.append(librosa.feature.mfcc(S=log_mel, n_mfcc=spec.mfcc))
    return np.concatenate(parts, axis=0).T.astype(np.float32)


@lru_cache(maxsize=8)
def _mel_basis(spec: FeatureSpec) -> np.ndarray:
    return librosa.filters.mel(sr=spec.sample_rate, n_fft=spec.window, n_mels=spec.mel_bands)

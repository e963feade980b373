"""Room reverberation and additive noise in numpy, reproducible from one integer seed.

Workers call `apply_acoustics` on the resampled, padded speech before peak normalization,
so that the mix, however loud, is scaled into range and never clips.  Everything is
computed in float64 from `numpy.random.default_rng` generators seeded by the job, so the
same job gives the same samples in any worker.
"""

from __future__ import annotations

import numpy as np

from benchbase.data.synth.conditions import Acoustics, Noise, Reverb

__all__ = ["add_noise", "apply_acoustics", "impulse_response", "pink_noise", "reverberate", "snr_db"]

# The tail is cut where it has decayed by 60 dB (RT60's definition); beyond that it is
# far below the noise floor.
_DECAY_DB = 60.0


def pink_noise(length: int, rng: np.random.Generator, sample_rate: int, band_hz: tuple[float, float]) -> np.ndarray:
    """Gaussian noise with power falling 3 dB per octave inside `band_hz`, none outside."""
    spectrum = np.fft.rfft(rng.standard_normal(length))
    freqs = np.fft.rfftfreq(length, 1.0 / sample_rate)
    low, high = band_hz
    inside = (freqs >= low) & (freqs <= high)
    gain = np.zeros_like(freqs)
    gain[inside] = 1.0 / np.sqrt(freqs[inside])  # amplitude ~ f^-1/2 <=> power ~ 1/f
    return np.fft.irfft(spectrum * gain, n=length)


def snr_db(signal: np.ndarray, noise: np.ndarray) -> float:
    """10 log10 of mean signal power over mean noise power."""
    return float(10.0 * np.log10(np.mean(np.square(signal)) / np.mean(np.square(noise))))


def add_noise(audio: np.ndarray, noise: Noise, rng: np.random.Generator, sample_rate: int,
              speech: slice = slice(None)) -> np.ndarray:
    """`audio` plus noise scaled to `noise.snr_db` below audio's power over `speech`.

    The noise covers all of `audio`; both powers are measured over `speech` only, so the
    silence padded around an utterance does not dilute the speech's power.
    """
    if noise.kind != "pink":
        raise ValueError(f"unknown noise kind {noise.kind!r}")
    added = pink_noise(len(audio), rng, sample_rate, noise.band_hz)
    speech_power = float(np.mean(np.square(audio[speech])))
    noise_power = float(np.mean(np.square(added[speech])))
    scale = np.sqrt(speech_power / (noise_power * 10.0 ** (noise.snr_db / 10.0)))
    return audio + scale * added


def impulse_response(reverb: Reverb, rng: np.random.Generator, sample_rate: int) -> np.ndarray:
    """A unit direct path, then Gaussian noise decaying by 60 dB over `reverb.rt60_s`.

    The tail's energy is set so that direct / tail energy is exactly `reverb.drr_db`.
    """
    length = max(2, round(reverb.rt60_s * sample_rate))
    seconds = np.arange(1, length) / sample_rate
    # Amplitude falls by _DECAY_DB / 20 decades in rt60_s, so energy falls by _DECAY_DB dB.
    envelope = 10.0 ** (-(_DECAY_DB / 20.0) * seconds / reverb.rt60_s)
    tail = rng.standard_normal(length - 1) * envelope
    tail *= np.sqrt(10.0 ** (-reverb.drr_db / 10.0) / np.sum(np.square(tail)))
    return np.concatenate([[1.0], tail])


def reverberate(audio: np.ndarray, response: np.ndarray) -> np.ndarray:
    """Causal convolution, cut to `audio`'s length (the tail past the end is dropped)."""
    from scipy.signal import fftconvolve  # only workers need scipy

    return fftconvolve(audio, response)[: len(audio)]


def apply_acoustics(audio: np.ndarray, acoustics: Acoustics, seed: int, sample_rate: int,
                    speech: slice = slice(None)) -> np.ndarray:
    """Reverberate, then add noise, as `acoustics` says; float64 out, unchanged when clean.

    The room and the noise each get their own generator spawned from `seed`, so either
    stays the same if the other is switched off.
    """
    out = np.asarray(audio, dtype=np.float64)
    room_seed, noise_seed = np.random.SeedSequence(seed).spawn(2)
    if acoustics.reverb is not None:
        out = reverberate(out, impulse_response(acoustics.reverb, np.random.default_rng(room_seed), sample_rate))
    if acoustics.noise is not None:
        out = add_noise(out, acoustics.noise, np.random.default_rng(noise_seed), sample_rate, speech)
    return out

"""eSpeak NG through ctypes, using the library and voice data shipped by espeakng-loader.

eSpeak keeps its synthesis state in C globals (wave phase, flutter position, pitch
envelope, echo buffer ...) that survive from one utterance to the next, and neither
espeak_Cancel nor espeak_Terminate + espeak_Initialize resets them: the same text comes out
a few samples longer or shorter depending on what was spoken before.  A corpus that must be
byte-identical regardless of how utterances are spread over workers cannot live with that,
so every utterance gets a freshly loaded copy of the library (dlopen, synthesize, dlclose),
which re-runs the static initializers.  That costs about 2 ms per utterance.

eSpeak also seeds the noise generator behind breathy variants (f2, f3, ...) with time(NULL)
in espeak_Initialize, so two runs a second apart differ; we reseed it after every
initialization with a caller-chosen seed.

The library must not be loaded by anything else in the process, or dlclose would not unload
it; the corpus writer therefore synthesizes only in worker processes it starts itself.
"""

from __future__ import annotations

import _ctypes
import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

__all__ = ["EspeakError", "EspeakSynthesizer", "espeak_data_path", "espeak_library_path"]

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_BUFFER_MILLISECONDS = 200
_CHARS_UTF8 = 1
_PARAMETER_RATE = 1
_PARAMETER_PITCH = 3
_EE_OK = 0

_SynthCallback = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
)


class EspeakError(RuntimeError):
    """eSpeak NG could not be loaded or refused a request."""


def espeak_library_path() -> Path:
    import espeakng_loader

    return Path(espeakng_loader.get_library_path())


def espeak_data_path() -> Path:
    """The shipped `espeak-ng-data` directory."""
    import espeakng_loader

    return Path(espeakng_loader.get_data_path())


def _declare_signatures(library: ctypes.CDLL) -> None:
    library.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    library.espeak_Initialize.restype = ctypes.c_int
    library.espeak_SetSynthCallback.argtypes = [_SynthCallback]
    library.espeak_SetSynthCallback.restype = None
    library.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    library.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    library.espeak_ng_SetRandSeed.argtypes = [ctypes.c_long]
    library.espeak_ng_SetRandSeed.restype = None
    library.espeak_Synth.argtypes = [
        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
        ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(ctypes.c_uint), ctypes.c_void_p,
    ]
    for name in ("espeak_SetVoiceByName", "espeak_SetParameter", "espeak_Synth",
                 "espeak_Synchronize", "espeak_Terminate"):
        getattr(library, name).restype = ctypes.c_int


class EspeakSynthesizer:
    """Text -> float32 mono audio at eSpeak's native rate; create one per worker process."""

    def __init__(self, library_path: Path | None = None, data_path: Path | None = None) -> None:
        self.library_path = Path(library_path or espeak_library_path())
        self.data_path = Path(data_path or espeak_data_path())
        self.variants_dir = self.data_path / "voices" / "!v"
        self.sample_rate = 0
        self._chunks: list[np.ndarray] = []
        # Kept on self: ctypes frees the trampoline when the Python object dies.
        self._callback = _SynthCallback(self._collect)
        with self._fresh_library():
            pass  # fails early on a broken installation and learns the sample rate

    def _collect(self, samples, count: int, events) -> int:
        if samples and count > 0:
            self._chunks.append(np.ctypeslib.as_array(samples, shape=(count,)).copy())
        return 0  # 0 = keep synthesizing

    def _load(self) -> ctypes.CDLL:
        try:
            library = ctypes.CDLL(str(self.library_path))
        except OSError as error:
            raise EspeakError(f"{self.library_path}: cannot load eSpeak NG ({error})") from None
        _declare_signatures(library)
        return library

    @contextmanager
    def _fresh_library(self) -> Iterator[ctypes.CDLL]:
        library = self._load()
        try:
            self.sample_rate = self._initialize(library)
            yield library
        finally:
            library.espeak_Terminate()
            _ctypes.dlclose(library._handle)

    def _initialize(self, library: ctypes.CDLL) -> int:
        # `path` is the directory that contains espeak-ng-data (1.52 also accepts the data
        # directory itself, but the parent is what the API documents).
        home = str(self.data_path.parent).encode()
        sample_rate = library.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, _BUFFER_MILLISECONDS, home, 0)
        if sample_rate <= 0:
            raise EspeakError(f"{self.data_path}: espeak_Initialize failed ({sample_rate})")
        library.espeak_SetSynthCallback(self._callback)
        return sample_rate

    def _select_voice(self, library: ctypes.CDLL, voice_name: str, rate: int, pitch: int) -> None:
        variant = voice_name.partition("+")[2]
        # eSpeak silently ignores an unknown variant, so check the file ourselves.
        if variant and not (self.variants_dir / variant).is_file():
            raise EspeakError(f"{self.variants_dir / variant}: no such eSpeak voice variant")
        status = library.espeak_SetVoiceByName(voice_name.encode())
        if status != _EE_OK:
            raise EspeakError(f"eSpeak has no voice {voice_name!r} (status {status})")
        library.espeak_SetParameter(_PARAMETER_RATE, rate, 0)
        library.espeak_SetParameter(_PARAMETER_PITCH, pitch, 0)

    def synthesize(self, text: str, voice_name: str, rate: int, pitch: int,
                   noise_seed: int = 0) -> np.ndarray:
        """Speak `text` with e.g. voice "en-us+f3", rate in words/min, pitch 0-100.

        The result depends only on the arguments (`noise_seed` seeds breath/aspiration noise).
        """
        self._chunks = []
        with self._fresh_library() as library:
            library.espeak_ng_SetRandSeed(noise_seed)
            self._select_voice(library, voice_name, rate, pitch)
            encoded = text.encode("utf-8") + b"\0"
            status = library.espeak_Synth(encoded, len(encoded), 0, 0, 0, _CHARS_UTF8, None, None)
            if status != _EE_OK:
                raise EspeakError(f"espeak_Synth failed for {text!r} (status {status})")
            library.espeak_Synchronize()
        samples = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.int16)
        return samples.astype(np.float32) / 32768.0

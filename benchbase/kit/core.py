"""What the conformance rules share: the failure type, the backend under test with its data,
and the one training step that several rules inspect."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from benchbase.backend import Backend, DeviceKind
from benchbase.families.parts import CheckedParts, FamilyParts, ReferenceStep, family_parts
from benchbase.kit.data import KitData
from benchbase.specs import ModelSpec, OptimizerSpec

__all__ = ["ConformanceFailure", "FirstStep", "Kit", "describe_difference", "describe_error"]


class ConformanceFailure(Exception):
    """A backend broke a rule: ``message`` says what was expected and what was found."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{rule}: {message}")
        self.rule = rule
        self.message = message


@dataclass(frozen=True)
class FirstStep:
    """One training step from the kit's random weights on the batch with an impossible
    alignment, and the family reference's view of it."""

    weights_before: dict[str, np.ndarray]
    loss: object
    """What train_step returned, unchecked."""
    weights_after: dict[str, np.ndarray]
    reference: ReferenceStep
    """The reference's loss and running statistics of this step, with their float32 bounds."""


class Kit:
    """A backend class under test, the kit's data and the seed the rules build with.

    Rules build backends through ``backend()``, which always closes them; results several
    rules look at (the first training step) are computed once per kit.
    """

    def __init__(self, backend_class: type[Backend], data: KitData, seed: int = 0, device: DeviceKind = "cpu") -> None:
        self.backend_class = backend_class
        self.data = data
        self.seed = seed
        self.device = device
        """Where the backends under test train: a CPU, or one CUDA GPU (``--device cuda``)."""
        self._first_step: FirstStep | BaseException | None = None

    @property
    def parts(self) -> FamilyParts:
        """The parts of the kit's model family: its layout, reference and bounds (a member they lack
        fails the rule that needs it in one line naming it)."""
        return CheckedParts(family_parts(self.data.model), self.family)  # type: ignore[return-value]

    @property
    def family(self) -> str:
        return self.data.model.family

    @property
    def model(self) -> ModelSpec:
        """The reference checks' model: the workload's without dropout (``FamilyParts.without_dropout``)."""
        return self.data.model

    @contextmanager
    def backend(self, seed: int | None = None, model: ModelSpec | None = None,
                optimizer: OptimizerSpec | None = None) -> Iterator[Backend]:
        """A built backend (the kit's seed, model and optimizer unless given), closed when the block ends.

        An exception from any of its methods carries the method's name (see ``describe_error``).
        """
        instance = _Traced(self.backend_class())
        try:
            instance.build(self.data.context(self.seed if seed is None else seed, model, device=self.device,
                                             optimizer=optimizer))
            yield instance  # a Backend by duck typing: every call is forwarded
        finally:
            instance.close()

    def parity_weights(self) -> dict[str, np.ndarray]:
        """Random weights for the reference checks, the same for every rule of this kit."""
        return self.parts.random_weights(self.model, self.data.feature_dimension, self.seed + 1)

    def first_step(self) -> FirstStep:
        """train_step from the parity weights on the batch with an impossible alignment; a
        backend's error is re-raised to every rule that asks (it is not retried)."""
        if self._first_step is None:
            try:
                self._first_step = self._take_first_step()
            except Exception as error:  # noqa: BLE001  (kept for the next rule that asks)
                self._first_step = error
        if isinstance(self._first_step, BaseException):
            raise self._first_step
        return self._first_step

    def _take_first_step(self) -> FirstStep:
        weights = self.parity_weights()
        batch = self.data.impossible_batch
        with self.backend() as backend:
            backend.import_weights(weights)
            loss = backend.train_step(batch)
            after = backend.export_weights()
        return FirstStep(weights, loss, after, self.parts.reference_step(weights, self.model, batch))


def describe_difference(found: np.ndarray, expected: np.ndarray, mask: np.ndarray | None = None) -> tuple[float, str]:
    """The largest absolute difference (over ``mask`` where given) and where it is, as text."""
    difference = np.abs(np.asarray(found, dtype=np.float64) - np.asarray(expected, dtype=np.float64))
    if mask is not None:
        difference = np.where(mask, difference, 0.0)
    if difference.size == 0:
        return 0.0, "nowhere"
    where = np.unravel_index(int(np.nanargmax(np.nan_to_num(difference, nan=np.inf))), difference.shape)
    worst = float(difference[where])
    return worst, (f"at {tuple(int(i) for i in where)}: found {float(np.asarray(found)[where]):.6g}, "
                   f"expected {float(np.asarray(expected)[where]):.6g}")


class _Traced:
    """A backend whose methods' exceptions note which method raised them (the type is kept, so
    a rule can still tell a BenchbaseError from another exception)."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def __getattr__(self, name: str):
        attribute = getattr(self._backend, name)
        if not callable(attribute):
            return attribute

        def traced(*args, **kwargs):
            try:
                return attribute(*args, **kwargs)
            except Exception as error:
                if not any(note.startswith(_CALL_NOTE) for note in getattr(error, "__notes__", ())):
                    error.add_note(f"{_CALL_NOTE}{name}")
                raise

        return traced


_CALL_NOTE = "raised by the backend's "


def describe_error(error: BaseException, limit: int = 400, method: bool = True) -> str:
    """An exception from inside a backend as one line: its type and message. Frameworks'
    messages can hold whole tracebacks, with the cause at the end: a long one keeps its
    beginning and its end, ``limit`` characters in all. ``method``: say which backend method
    raised it, when known."""
    text = " ".join(str(error).split())
    if len(text) > limit:
        text = f"{text[: limit // 3]} ... {text[-(limit - limit // 3 - 5):]}"
    described = f"{type(error).__name__}: {text}" if text else type(error).__name__
    methods = [note.removeprefix(_CALL_NOTE) for note in getattr(error, "__notes__", ()) if note.startswith(_CALL_NOTE)]
    return f"{methods[0]}() raised {described}" if methods and method else described

"""``BackendConformance``: the conformance kit as pytest tests, one per rule.

    class TestMyBackend(BackendConformance):
        backend = "mine"               # a registered backend name ...
        # backend_class = MyBackend    # ... or the class itself
        # family = "rnnt"              # the model family to prove (default ds2)
        # symbols = 1024               # its kit model's output symbols (default: its own, 30)

A failing rule fails its test with the rule's message; a rule that does not apply to the family
is skipped. The kit's data and what several rules share (the first training step) are made
once per test class.
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from benchbase.backend import Backend
from benchbase.kit.conformance import RULES, Kit, resolve_backend, run_conformance, select_rules
from benchbase.kit.data import load_kit_data

__all__ = ["BackendConformance"]


class BackendConformance:
    """Base class of a backend's conformance tests; set ``backend`` or ``backend_class``."""

    backend: ClassVar[str | None] = None
    backend_class: ClassVar[type[Backend] | None] = None
    conformance_seed: ClassVar[int] = 0
    family: ClassVar[str] = "ds2"
    symbols: ClassVar[int | None] = None

    @pytest.fixture(scope="class")
    @classmethod
    def conformance_kit(cls) -> Kit:
        data = load_kit_data(family=cls.family, symbols=cls.symbols)
        return Kit(_backend_under_test(cls), data, seed=cls.conformance_seed)

    @pytest.mark.parametrize("rule", [rule.name for rule in RULES])
    def test_conformance(self, conformance_kit: Kit, rule: str) -> None:
        if rule not in {applying.name for applying in select_rules(None, self.family)}:
            pytest.skip(f"{rule} does not apply to the {self.family} family")
        [result] = run_conformance(conformance_kit.backend_class, [rule], family=self.family, kit=conformance_kit)
        if not result.passed:
            pytest.fail(f"{rule}: {result.message}", pytrace=False)


def _backend_under_test(cls: type) -> type[Backend]:
    if cls.backend_class is not None:
        return cls.backend_class
    if cls.backend is None:
        raise TypeError(f"{cls.__name__} must set backend (a registered name) or backend_class")
    return resolve_backend(cls.backend)

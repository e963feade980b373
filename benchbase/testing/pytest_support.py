"""``BackendConformance``: the conformance kit as pytest tests, one per family and rule.

    class TestMyBackend(BackendConformance):
        backend = "mine"               # a registered backend name ...
        # backend_class = MyBackend    # ... or the class itself
        # family = "rnnt"              # one model family to prove (default: every family it declares)
        # symbols = 1024               # its kit model's output symbols (default: its own, 30)
        # slow = ("conformer",)        # families or FAMILY-RULE cases to mark slow (`make test-quick` skips them)

Each family the backend declares (``Capabilities.families``) gets a test for each rule that applies
to it, named ``test_conformance[FAMILY-RULE]``. A failing rule fails its test with the rule's
message. The kit's data and what several rules share (the first training step) are made once per
test class and family: one ``Kit`` per (backend, family).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import ClassVar

import pytest

from benchbase.backend import Backend
from benchbase.kit.conformance import Kit, Rule, families_to_test, resolve_backend, run_conformance, select_rules
from benchbase.kit.data import load_kit_data

__all__ = ["BackendConformance"]


class BackendConformance:
    """Base class of a backend's conformance tests; set ``backend`` or ``backend_class``."""

    backend: ClassVar[str | None] = None
    backend_class: ClassVar[type[Backend] | None] = None
    conformance_seed: ClassVar[int] = 0
    family: ClassVar[str | None] = None
    symbols: ClassVar[int | None] = None
    slow: ClassVar[Collection[str]] = ()

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        # Called by pytest for each test of the class: the families come from the backend, so
        # the cases are known only once the subclass names it.
        if metafunc.function.__name__ != "test_conformance":
            return
        families = families_to_test(_backend_under_test(type(self)), self.family)
        cases = [(family, rule) for family in families for rule in select_rules(None, family)]
        metafunc.parametrize(("family", "rule"), [
            pytest.param(family, rule.name, id=f"{family}-{rule.name}", marks=self._marks(family, rule))
            for family, rule in cases])

    def _marks(self, family: str, rule: Rule) -> list[pytest.MarkDecorator]:
        """slow where the suite says so; numerics where the rule holds floats to the error model's
        bounds (``make test-isa`` runs those again one CPU ISA lower)."""
        marks = [pytest.mark.slow] if {family, f"{family}-{rule.name}"} & set(self.slow) else []
        return marks + ([pytest.mark.numerics] if rule.within_bounds else [])

    @pytest.fixture(scope="class")
    @classmethod
    def conformance_kits(cls) -> dict[str, Kit]:
        """The class's kits by family, each made when its family's first rule runs."""
        return {}

    @pytest.fixture
    @classmethod
    def conformance_kit(cls, conformance_kits: dict[str, Kit], family: str) -> Kit:
        if family not in conformance_kits:
            data = load_kit_data(family=family, symbols=cls.symbols)
            conformance_kits[family] = Kit(_backend_under_test(cls), data, seed=cls.conformance_seed)
        return conformance_kits[family]

    def test_conformance(self, conformance_kit: Kit, rule: str) -> None:
        [result] = run_conformance(conformance_kit.backend_class, [rule], family=conformance_kit.family,
                                   kit=conformance_kit)
        if not result.passed:
            pytest.fail(f"{rule}: {result.message}", pytrace=False)


def _backend_under_test(cls: type) -> type[Backend]:
    if cls.backend_class is not None:
        return cls.backend_class
    if cls.backend is None:
        raise TypeError(f"{cls.__name__} must set backend (a registered name) or backend_class")
    return resolve_backend(cls.backend)

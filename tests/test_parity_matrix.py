"""The parity matrix's cells come from the registry: every family x every backend declaring it."""

from __future__ import annotations

import pytest
from benchmark_scripts import load_benchmark

from benchbase.backend import Capabilities
from benchbase.errors import InputError
from benchbase.specs.model import model_families

parity_matrix = load_benchmark("parity_matrix")


def _declaring(families: set[str], precisions: set[str], narrower: dict[str, set[str]] | None = None) -> Capabilities:
    return Capabilities(families=frozenset(families), precisions=frozenset(precisions),
                        family_precisions=tuple((family, frozenset(p)) for family, p in (narrower or {}).items()))


def _cells(rows) -> set[tuple[str, str, str]]:
    return {(row.family, row.precision, backend) for row in rows for backend in row.backends}


def test_every_family_by_every_backend_declaring_it_is_a_cell(registry):
    families = model_families()
    backends = {"all": _declaring(set(families), {"fp32", "bf16"}),
                "first": _declaring({families[0]}, {"fp32", "bf16"}, {families[0]: {"fp32"}}),
                "none": _declaring(set(), {"fp32"})}
    rows = parity_matrix.plan_rows(registry.workloads, families, backends, ("fp32", "bf16"))
    expected = ({(family, precision, "all") for family in families for precision in ("fp32", "bf16")}
                | {(families[0], "fp32", "first")})
    assert _cells(rows) == expected
    for row in rows:
        assert row.workload.endswith("-mini") and registry.workload(row.workload).model.family == row.family


def test_a_new_backend_is_a_cell_of_every_family_it_declares(registry):
    families = model_families()
    before = parity_matrix.plan_rows(registry.workloads, families, {"old": _declaring(set(families), {"fp32"})},
                                     ("fp32",))
    after = parity_matrix.plan_rows(registry.workloads, families, {"old": _declaring(set(families), {"fp32"}),
                                                                    "new": _declaring(set(families), {"fp32"})},
                                    ("fp32",))
    assert _cells(after) - _cells(before) == {(family, "fp32", "new") for family in families}


def test_a_family_without_a_mini_workload_is_refused(registry):
    workloads = {name: spec for name, spec in registry.workloads.items() if not name.endswith("-mini")}
    with pytest.raises(InputError, match="no registered -mini workload"):
        parity_matrix.plan_rows(workloads, model_families(), {"all": _declaring(set(model_families()), {"fp32"})},
                                ("fp32",))


@pytest.mark.parametrize(("flags", "precisions"), [({"avx512f", "avx2"}, ("fp32",)),
                                                   ({"avx512f", "avx512_bf16"}, ("fp32", "bf16")),
                                                   ({"amx_bf16"}, ("fp32", "bf16"))])
def test_bf16_is_a_row_where_the_cpu_has_bf16_kernels(flags, precisions):
    assert parity_matrix.cpu_precisions(flags) == precisions


def test_an_operation_counts_only_where_it_is_the_outermost_running():
    # A call (0-10) with an operation inside it on another thread (2-5), and an operation
    # (8-14) overlapping the call's end on a third thread, then a gap, then one more (20-21).
    intervals = [(0, 10), (2, 5), (8, 14), (20, 21)]
    owned = parity_matrix.outermost_wall_time(intervals)
    assert owned == [10, 0, 4, 1]
    assert sum(owned) == 10 + 4 + 1  # the union of the intervals: nothing counted twice


def test_of_two_operations_starting_together_the_longer_is_outermost():
    assert parity_matrix.outermost_wall_time([(0, 3), (0, 7), (5, 6)]) == [0, 7, 0]


@pytest.mark.parametrize(("label", "counted"), [
    ("gradient_tape/conv/Conv2DBackpropInput:Conv2DBackpropInput", True),
    ("EagerExecute: __inference_train_28917", False),  # the call: its operations count
    ("StatefulPartitionedCall:StatefulPartitionedCall", False),
    ("ThreadpoolDevice::Compute", False),
])
def test_a_functions_call_is_not_one_of_its_operations(label, counted):
    assert parity_matrix._is_operation(label) is counted


@pytest.mark.parametrize(("name", "kind", "stage"), [
    ("gradient_tape/dense/MatMul", "MatMul", "backward"),
    ("lstm/BlockLSTMV2", "BlockLSTMGradV2", "backward"),  # a gradient kernel named after its op's scope
    ("conv/Conv2D", "_MklNativeConv2DBackpropFilter", "backward"),
    ("lstm/BlockLSTMV2", "BlockLSTMV2", "forward"),
    ("Adam/update/ResourceApplyAdam", "ResourceApplyAdam", "optimizer"),
])
def test_tensorflows_operations_fall_in_their_stage(name, kind, stage):
    assert parity_matrix._tf_stage(name, kind) == stage

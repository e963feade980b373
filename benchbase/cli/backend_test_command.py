"""`benchbase backend-test NAME [--family F | --workload W] [--precision P] [--symbols N] [--device D]`.

Proves a backend: runs the conformance kit (``benchbase.kit``) on the kit's small real-speech batches, for
every model family the backend declares (``Capabilities.families``) or the one --family names
(or --workload's family: the kit proves a family on its own small model, not the workload's sizes),
each family with the kit's rules that apply to it (``RULES``): every one, or those named with --rule. With
--precision (int8-emulated), the family's rules for that precision instead
(``PRECISION_RULE_SETS``), for the families the backend declares it for. With --symbols N, each
family's kit model predicts N output symbols instead of the alphabet's 30 (a subword vocabulary's
width, up to 1024), on labels drawn from them (``benchbase.kit.data``). With --device cuda, the
backends under test train on one GPU (the same rules and bounds; the thread budget's does not
apply). Exit codes: 0 every
rule passes, 1 some rule fails, 2 an unknown backend, family, precision or rule, a family (or
precision) the backend does not declare, or symbols out of the model spec's bounds.
"""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from benchbase.cli.app import cli
from benchbase.cli.framework_logs import filtered_native_logs
from benchbase.errors import BenchbaseError, InputError
from benchbase.specs import ModelSpec

__all__ = ["backend_test", "results_table"]


def _symbols_bounds() -> tuple[int, int]:
    """The fewest and most output symbols ``ModelSpec`` allows (its field's own bounds)."""
    metadata = ModelSpec.model_fields["symbols"].metadata
    return (next(bound.ge for bound in metadata if hasattr(bound, "ge")),
            next(bound.le for bound in metadata if hasattr(bound, "le")))


@cli.command("backend-test")
@click.argument("name")
@click.option("--family", default=None, metavar="FAMILY",
              help="Prove this model family only (ds2, rnnt, or a plugin's); default: every family the backend "
              "declares.")
@click.option("--workload", default=None, metavar="WORKLOAD",
              help="Prove the model family of this workload (a name or a YAML file), e.g. rnnt-mini: the same as "
              "--family with its family.")
@click.option("--rule", "rules", multiple=True, metavar="RULE",
              help="Run only this rule (repeatable); default: every rule of each family, in order.")
@click.option("--precision", default="fp32", show_default=True, metavar="PRECISION",
              help="Prove this precision: fp32 (the family's rules) or int8-emulated (its own rules, against the "
              "quantized reference).")
@click.option("--symbols", type=click.IntRange(*_symbols_bounds()), default=None, metavar="N",
              help="Prove the kit model at N output symbols, the blank included (a subword vocabulary's width, "
              "e.g. 1024), on labels drawn from them; default: the kit model's own (the alphabet's 30).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Train the backends under test on a CPU or on one CUDA GPU (the first visible): the same rules "
              "and bounds, as the spec's fp32 is IEEE float32 on both (TF32 off).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead of a table.")
def backend_test(name: str, family: str | None, workload: str | None, rules: tuple[str, ...], precision: str,
                 symbols: int | None, device: str, as_json: bool) -> None:
    """Run the conformance kit on backend NAME (see `benchbase plugins`)."""
    if workload is not None:
        family = _workload_family(workload, family)
    # The kit imports NumPy-heavy modules; loaded here so that other commands stay fast.
    from benchbase.kit.conformance import (
        RULES,
        families_to_test,
        resolve_backend,
        rules_by_family,
        run_conformance,
    )
    from benchbase.kit.data import kit_model, load_kit_data

    # An unknown family or rule fails before any work.
    if family:
        rules_by_family(rules or None, [family], precision)
    elif precision == "fp32" and set(rules) - {rule.name for rule in RULES}:
        unknown = sorted(set(rules) - {rule.name for rule in RULES})
        raise InputError(f"unknown conformance rule {', '.join(map(repr, unknown))}; available: "
                         f"{', '.join(rule.name for rule in RULES)}")
    with filtered_native_logs():  # the framework's C++ start-up lines, not the kit's output
        backend_class = resolve_backend(name)
    if device != "cpu":
        visible = backend_class.visible_devices(device)
        if visible is not None and visible < 1:
            raise InputError(f"--device {device}: backend {name!r} sees no {device} device here")
    plan = rules_by_family(rules or None, families_to_test(backend_class, family, precision), precision)
    # Symbols a family's spec refuses fail before any work too; None: the kit model's own.
    models = {tested: kit_model(tested, symbols) for tested in plan}
    widths = {tested: model.symbols if model.symbols != kit_model(tested).symbols else None
              for tested, model in models.items()}
    progress = Console(stderr=True)
    results = []
    for tested, selected in plan.items():
        data = load_kit_data(progress=lambda message: progress.print(f"[dim]{message}[/]"), family=tested,
                             symbols=symbols)
        on_result = None if as_json else (
            lambda r: progress.print(f"[dim]{r.name}: {'pass' if r.passed else 'FAIL'}[/]"))
        results += run_conformance(backend_class, [rule.name for rule in selected], family=tested, data=data,
                                   on_result=on_result, precision=precision, device=device)
    failed = [result.name for result in results if not result.passed]
    if as_json:
        click.echo(json.dumps({"backend": name, "families": list(plan), "precision": precision, "device": device,
                               "symbols": {tested: model.symbols for tested, model in models.items()},
                               "passed": not failed, "rules": [r.to_dict() for r in results]}, indent=2))
    else:
        for tested in plan:
            Console().print(results_table(name, [result for result in results if result.family == tested], tested,
                                          precision, widths[tested]))
    if failed:
        at = f" at {symbols} symbols" if any(widths.values()) else ""  # any: the families' own may differ
        # A BenchbaseError (exit 1), as `benchbase check` does: main() drops a click Exit's code.
        raise BenchbaseError(f"backend {name!r} fails {len(failed)} of {len(results)} conformance rule(s){at}: "
                             f"{', '.join(failed)}")


def _workload_family(workload: str, family: str | None) -> str:
    """The model family of ``workload`` (registered name or YAML file); --family, if given too, must agree."""
    from benchbase.plugin_host import get_plugin_manager
    from benchbase.plugin_host.registry import collect_registry

    found = collect_registry(get_plugin_manager()).workload(workload).model.family
    if family is not None and family != found:
        raise InputError(f"--family {family} and --workload {workload} (family {found}) disagree")
    return found


def results_table(name: str, results, family: str = "ds2", precision: str = "fp32",
                  symbols: int | None = None) -> Table:
    """``symbols``: the kit model's output symbols where not its own (None)."""
    passed = sum(result.passed for result in results)
    verdict = "[green]PASS[/]" if passed == len(results) else "[bold red]FAIL[/]"
    what = f"{family} family" if precision == "fp32" else f"{family} family in {precision}"
    if symbols is not None:
        what += f" at {symbols} symbols"
    table = Table(title=f"{verdict} backend {name}, {what}: {passed}/{len(results)} conformance rules pass",
                  title_justify="left")
    table.add_column("rule")
    table.add_column("result")
    table.add_column("seconds", justify="right")
    table.add_column("message", overflow="fold")
    for result in results:
        status = "[green]pass[/]" if result.passed else "[bold red]FAIL[/]"
        table.add_row(result.name, status, f"{result.seconds:.2f}", result.message or "-")
    return table

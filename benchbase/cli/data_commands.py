"""`benchbase data synth` and `benchbase data prepare`."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeRemainingColumn
from rich.text import Text

from benchbase.cli.app import cli
from benchbase.errors import InputError
from benchbase.plugin_host import get_plugin_manager
from benchbase.plugin_host.registry import collect_registry


@cli.group()
def data() -> None:
    """Synthesize a corpus or prepare features."""


@data.command()
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Corpus folder (LibriSpeech layout).")
# At least one utterance for each of the corpus's five subsets (synth's conditions.SPLITS;
# not imported here, where it would load numpy for every command).
@click.option("--utterances", type=click.IntRange(5, 10_000_000), default=3000, show_default=True)
@click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=0, show_default=True)
@click.option("--text", "text_file", type=click.Path(path_type=Path), help="Sentences to speak, one per line.")
def synth(out: Path, utterances: int, seed: int, text_file: Path | None) -> None:
    """Synthesize a speech corpus with eSpeak NG in LibriSpeech's subsets, on disjoint voices.

    train, dev-clean, dev-other, test-clean, test-other; "other" has accents never heard
    in train or clean, faster speech, background noise and room reverberation.
    """
    from benchbase.data.synth import CorpusError, synthesize_corpus

    console = Console()
    try:
        with _progress(console) as progress:
            task = progress.add_task("synthesizing", total=utterances)
            summary = synthesize_corpus(out, utterances=utterances, seed=seed, text_file=text_file,
                                        progress=lambda done, total: progress.update(task, completed=done, total=total))
    except CorpusError as error:
        raise InputError(str(error)) from None
    for split, count in summary.utterances.items():
        console.print(f"{split}: {count} utterances, {summary.voices[split]} voices, "
                      f"{summary.seconds[split] / 3600:.2f} h")
    console.print(f"corpus: {out}")


@data.command()
@click.option("--librispeech", "root", type=click.Path(path_type=Path, exists=True, file_okay=False), required=True,
              help="Root holding LibriSpeech-layout subsets (or a synthetic corpus).")
@click.option("--subsets", required=True, help="Comma-separated subset folders, e.g. train-clean-100,dev-clean.")
@click.option("--workload", "workload_name", default="ds2", show_default=True,
              help="Workload whose feature and filter settings apply.")
@click.option("--train", "train_subsets", help="Subsets whose statistics normalize features (default: train*).")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Feature store folder.")
@click.option("--workers", type=click.IntRange(1, 1024), help="Processes (default: all cores).")
def prepare(root: Path, subsets: str, workload_name: str, train_subsets: str | None, out: Path,
            workers: int | None) -> None:
    """Extract features into shards of 64 utterances; resumable."""
    from benchbase.data.prepare import REPORT_FILE, prepare_store

    workload = collect_registry(get_plugin_manager()).workload(workload_name)
    names = tuple(name.strip() for name in subsets.split(",") if name.strip())
    train = tuple(train_subsets.split(",")) if train_subsets else tuple(n for n in names if n.startswith("train"))
    if not train:
        raise InputError("--subsets names no training subset (train*): pass --train to say which normalize")
    console = Console()
    with _progress(console, unit="utt") as progress:
        task = progress.add_task("extracting features", total=None)
        description = prepare_store(root, {"train": train, "all": names}, workload.features, workload.model,
                                    workload.data.max_duration, out, workers,
                                    lambda done, total: progress.update(task, completed=done, total=total))
    for name, split in description["splits"].items():
        dropped = ", ".join(f"{reason} {count}" for reason, count in split["dropped"].items()) or "none"
        console.print(f"{name}: kept {split['utterances']} of {split['listed']} ({100 * split['kept_fraction']:.1f}%), "
                      f"{split['seconds'] / 3600:.2f} h, resampled {split['resampled']}; dropped: {dropped}")
    console.print(f"store: {out}  (skipped files and reasons: {out / REPORT_FILE})")


@data.command()
@click.argument("store", type=click.Path(path_type=Path))
def verify(store: Path) -> None:
    """Check every shard of STORE against its checksums; exit 0 sound, 1 damaged, 2 not a store."""
    from benchbase.data.integrity import verify_store
    from benchbase.data.store import FeatureStore

    FeatureStore(store)  # a one-line error for a folder that is no store at all
    problems = verify_store(store)
    for problem in problems:
        click.echo(problem)
    if problems:
        raise click.exceptions.Exit(1)
    description = FeatureStore(store).description
    shards = sum(len(split.get("checksums", {})) for split in description["splits"].values())
    click.echo(f"{store}: {shards} shards match their checksums")


def _progress(console: Console, unit: str = "") -> Progress:
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
    if unit:
        columns.append(_RateColumn(unit))
    return Progress(*columns, TimeRemainingColumn(), console=console)


class _RateColumn(ProgressColumn):
    """Items per second (rich's own speed column formats bytes)."""

    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task) -> Text:
        return Text("" if task.speed is None else f"{task.speed:,.0f} {self.unit}/s")

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
@click.option("--subsets", help="Comma-separated subset folders, e.g. train-clean-100,dev-clean (default: the "
              "workload's train, dev and test subsets).")
@click.option("--workload", "workload_name", default="ds2", show_default=True,
              help="Workload whose feature, filter and vocabulary settings apply.")
@click.option("--set", "overrides", multiple=True, metavar="workload.PATH=VALUE",
              help="Change a workload setting first, as `benchbase run --set`, e.g. "
              "'workload.data.tokens={kind: sentencepiece, size: 255}'.")
@click.option("--train", "train_subsets", help="Subsets whose statistics normalize features (default: train*).")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Feature store folder.")
@click.option("--workers", type=click.IntRange(1, 1024), help="Processes (default: all cores).")
@click.option("--vocabulary", "vocabulary_file", type=click.Path(path_type=Path),
              help="A sentencepiece model to label with instead of training one: the workload's size of pieces, "
              "the blank at 0 (as a store's vocabulary.model).")
def prepare(root: Path, subsets: str | None, workload_name: str, overrides: tuple[str, ...],
            train_subsets: str | None, out: Path, workers: int | None, vocabulary_file: Path | None) -> None:
    """Extract features into shards of 64 utterances, and train the workload's sentencepiece
    vocabulary on the training transcripts if it has one (or take --vocabulary's); resumable."""
    from benchbase.data.prepare import REPORT_FILE, given_vocabulary, prepare_store
    from benchbase.specs.overrides import apply_overrides, parse_override

    workload = collect_registry(get_plugin_manager()).workload(workload_name)
    parsed = [parse_override(text) for text in overrides]
    if any(root_name != "workload" for root_name, _, _ in parsed):
        raise InputError("--set: `data prepare` changes only the workload (workload.PATH=VALUE)")
    workload = apply_overrides(workload, [(path, value) for _, path, value in parsed], "workload")
    data_spec = workload.data
    if subsets is None:
        names = tuple(dict.fromkeys(data_spec.train + data_spec.dev + data_spec.test))
    else:
        names = tuple(name.strip() for name in subsets.split(",") if name.strip())
    default_train = data_spec.train if subsets is None else tuple(n for n in names if n.startswith("train"))
    train = tuple(train_subsets.split(",")) if train_subsets else default_train
    if not train:
        raise InputError("--subsets names no training subset (train*): pass --train to say which normalize")
    given = None if vocabulary_file is None else given_vocabulary(vocabulary_file, workload.data.tokens)
    console = Console()
    with _progress(console, unit="utt") as progress:
        task = progress.add_task("extracting features", total=None)
        description = prepare_store(root, {"train": train, "all": names}, workload.features, workload.model,
                                    workload.data.max_duration, out, workers,
                                    lambda done, total: progress.update(task, completed=done, total=total),
                                    workload.data.tokens, given)
    for name, split in description["splits"].items():
        dropped = ", ".join(f"{reason} {count}" for reason, count in split["dropped"].items()) or "none"
        console.print(f"{name}: kept {split['utterances']} of {split['listed']} ({100 * split['kept_fraction']:.1f}%), "
                      f"{split['seconds'] / 3600:.2f} h, resampled {split['resampled']}; dropped: {dropped}")
    vocabulary = description.get("vocabulary")
    if vocabulary:
        origin = "given" if vocabulary.get("given") else vocabulary["model_type"]
        console.print(f"vocabulary: {vocabulary['size']} {origin} pieces and the blank, "
                      f"sha256 {vocabulary['sha256'][:12]} ({out / vocabulary['file']})")
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

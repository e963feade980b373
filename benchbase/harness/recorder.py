"""Everything a run writes into its folder besides the compliance log.

metrics.jsonl and sentences.jsonl are appended line by line (a killed run keeps every line
written so far); decoded dev outputs, checkpoints and result.json are whole files written
atomically.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from benchbase.atomic import atomic_write_bytes, atomic_write_text, naming_the_file
from benchbase.backend import STEP_STAGES
from benchbase.errors import BenchbaseError
from benchbase.harness.disk_space import disk_full_error
from benchbase.harness.hook_payloads import BatchProgress
from benchbase.harness.resume import write_sidecar
from benchbase.harness.resume_state import ResumeState
from benchbase.run_folder import PERIODIC_CHECKPOINTS_KEPT, RunFolder, write_json_line
from benchbase.specs import RunResult

__all__ = ["RunRecorder", "save_atomically"]


class RunRecorder:
    def __init__(self, folder: RunFolder) -> None:
        self.folder = folder
        self._metrics = folder.append_lines(folder.metrics)
        self._sentences = folder.append_lines(folder.sentences)

    def close(self) -> None:
        self._metrics.close()
        self._sentences.close()

    def batch(self, progress: BatchProgress, step: float, utterances: int,
              timings: Mapping[str, float] | None = None, flops: tuple[int, int] | None = None) -> None:
        """One line per batch; ``timings`` are the backend's own (step_timings), e.g. communication -> comm_s;
        ``flops`` the batch's (padded, valid) training FLOPs by the family's cost model."""
        record = {
            "kind": "batch", "epoch": progress.epoch, "batch": progress.batch_index, "t": round(progress.seconds, 4),
            "loss": progress.loss, "step_s": round(step, 5), "wait_s": round(progress.data_wait, 5),
            "throughput": round(progress.throughput, 3), "utterances": utterances,
        }
        if flops is not None:
            record["flops_padded"], record["flops_valid"] = flops
        if timings and timings.get("communication") is not None:
            record["comm_s"] = round(float(timings["communication"]), 5)
        if timings and timings.get("communication_bytes") is not None:
            record["comm_bytes"] = int(timings["communication_bytes"])
        stages = {name: round(float(value), 6) for name, value in (timings or {}).items() if name in STEP_STAGES}
        if stages:
            record["stages"] = stages
        others = {name: value for name, value in (timings or {}).items()
                  if name not in ("communication", "communication_bytes", *STEP_STAGES)}
        if others:
            record["backend"] = others
        write_json_line(self._metrics, record)

    def checkpoint_time(self, batch_index: int, seconds: float, clock_seconds: float) -> None:
        """How long a periodic checkpoint took on the clock (the run's time breakdown counts it)."""
        write_json_line(self._metrics, {"kind": "checkpoint", "batch": batch_index, "t": round(clock_seconds, 4),
                                        "checkpoint_s": round(seconds, 5)})

    def evaluation(self, epoch: int, seconds: float, scored_subset: str, subsets: dict[str, dict],
                   eval_seconds: float) -> None:
        """One line per evaluation: the scored subset's rates at the top level, every subset's under "subsets"."""
        write_json_line(self._metrics, {"kind": "eval", "epoch": epoch, "t": round(seconds, 4),
                                        "subset": scored_subset, **subsets[scored_subset],
                                        "eval_s": round(eval_seconds, 4), "subsets": subsets})

    def training_sentence(self, record: dict) -> None:
        write_json_line(self._sentences, record)

    def decoded(self, path: Path, references: list[str], hypotheses: list[str]) -> Path:
        """Each utterance's reference and hypothesis, in the subset's order, at ``path`` (a
        RunFolder.decoded_* file)."""
        atomic_write_text(path, "".join(json.dumps({"reference": reference, "hypothesis": hypothesis}) + "\n"
                                        for reference, hypothesis in zip(references, hypotheses)))
        return path

    def checkpoint(self, batch_index: int, save: Callable[[Path], None], state: ResumeState,
                   ranks: Callable[[], dict[int, str]] = dict) -> Path:
        """``save`` writes a temporary file that is renamed into place; ``ranks`` returns, once they
        are in place too, the SHA-256 of every other rank's checkpoint beside it (a run of several
        processes); then its sidecar (checksums and the harness ``state``) follows, which makes the
        checkpoint complete. Older checkpoints are pruned with their sidecars and other ranks' files."""
        final = self.folder.periodic_checkpoint(batch_index)
        save_atomically(save, final)
        write_sidecar(final, state, ranks())
        for stale in self.folder.periodic_checkpoints()[:-PERIODIC_CHECKPOINTS_KEPT]:
            RunFolder.sidecar(stale).unlink(missing_ok=True)  # first: what is left is incomplete, never resumed
            stale.unlink()
            for other in RunFolder.rank_checkpoints(stale):
                other.unlink(missing_ok=True)
        return final

    def final_checkpoint(self, save: Callable[[Path], None]) -> Path:
        """The final checkpoint: the weights at run_stop, never pruned."""
        final = self.folder.final_checkpoint
        save_atomically(save, final)
        return final

    def exported_weights(self, weights: Mapping[str, np.ndarray]) -> tuple[Path, str]:
        """The final weights in the framework-neutral layout, written atomically; (path, sha256)."""
        path = self.folder.final_weights
        atomic_write_bytes(path, lambda handle: np.savez(handle, **{name: np.asarray(value)
                                                                   for name, value in weights.items()}))
        return path, hashlib.sha256(path.read_bytes()).hexdigest()

    def result(self, result: RunResult) -> None:
        self.folder.write_json(self.folder.result, result.model_dump(mode="json"))


def save_atomically(save: Callable[[Path], None], final: Path) -> None:
    """The backend writes a temporary file that is renamed into place; a failed write (a full
    disk, a backend error) leaves neither a torn checkpoint nor its temporary file, and the
    previous checkpoint at ``final`` (if any) is never replaced."""
    temporary = final.with_name(f".{final.name}.tmp")
    try:
        save(temporary)
        temporary.replace(final)
    except Exception as error:
        temporary.unlink(missing_ok=True)
        # Frameworks report a failed write in their own exception types (torch: "unexpected pos
        # N vs M"): a full disk is named as such, whatever the framework called it.
        full = disk_full_error(error, final)
        if full is not None:
            raise full from error
        if isinstance(error, OSError):
            if error.filename is None:
                raise naming_the_file(error, final) from error
            raise
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        raise BenchbaseError(f"{final}: the backend could not write the checkpoint ({first_line})") from error
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise

"""Every rank's own state at a checkpoint, in a run of several processes.

Rank 0's checkpoint holds rank 0's learner. The others' state differs from it: each rank's
dropout random state always, and under a strategy other than sync its weights, BatchNorm
statistics, quantizer ranges and optimizer too. So at each checkpoint (the periodic ones and
the one after SIGTERM, at the same batch on every rank, since every rank counts the batches
alike) each other rank writes its backend's checkpoint beside rank 0's, atomically, and hands
its SHA-256 to rank 0 through the run's process group; rank 0 writes the sidecar only then
(``RunRecorder.checkpoint``), so a sidecar always names files that are all in place. On
resume rank 0 chooses the checkpoint (``find_resume_point`` checks every rank's file), tells
the others where training goes on, and each loads its own file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from benchbase.data.integrity import file_digest
from benchbase.errors import BenchbaseError
from benchbase.harness.recorder import save_atomically
from benchbase.harness.world import Coordinator
from benchbase.run_folder import RunFolder

__all__ = ["collect_rank_checkpoints", "own_checkpoint", "write_own_checkpoint"]


def own_checkpoint(folder: RunFolder, batch_index: int, rank: int) -> Path:
    """Rank ``rank``'s checkpoint after ``batch_index`` batches (rank 0's is the periodic checkpoint itself)."""
    checkpoint = folder.periodic_checkpoint(batch_index)
    return checkpoint if rank == 0 else RunFolder.rank_checkpoint(checkpoint, rank)


def write_own_checkpoint(coordinator: Coordinator, folder: RunFolder, batch_index: int,
                         save: Callable[[Path], None]) -> None:
    """A rank other than 0 at a checkpoint: its state beside rank 0's, then its checksum to rank 0."""
    path = own_checkpoint(folder, batch_index, coordinator.world.rank)
    save_atomically(save, path)
    coordinator.gather(file_digest(path))


def collect_rank_checkpoints(coordinator: Coordinator) -> dict[int, str]:
    """Rank 0, its own checkpoint written: every other rank's checksum, once each one's file is in place."""
    if not coordinator.world.distributed:
        return {}
    digests = coordinator.gather(None)
    ranks = {rank: digest for rank, digest in enumerate(digests) if rank}
    wrong = [rank for rank, digest in ranks.items() if not isinstance(digest, str)]
    if wrong:
        raise BenchbaseError(f"rank {wrong[0]} reported no checkpoint at the batch rank 0 checkpointed")
    return ranks

"""A feature store that proves its integrity: checksums per shard, the corpus it came from,
and a cheap verification before every run.

Each shard's sidecar (NAME.json, written by `prepare` after the shard itself) and store.json
hold the SHA-256 of the shard's two files. Verifying reads every byte once, so a run does it
once per store per machine: a stamp file records what was verified (each file's size,
modification time, inode and inode change time, and the machine), and any change to the data
makes the stamp stale. The change time is what catches a file rewritten in place at the same
size with its modification time set back (``touch -r``, ``os.utime``): the kernel sets it on
every write and every utime to the current time, and no system call sets it to another.
"""

from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path

from benchbase.atomic import atomic_write_bytes
from benchbase.errors import InputError

__all__ = ["IDENTITY_FILE", "check_identity", "file_digest", "shard_checksums", "verify_store", "verified_store"]

IDENTITY_FILE = "prepare.json"
"""Written when a preparation starts: the corpus and settings every shard of the store comes from."""
STAMP_FILE = ".verified.json"
CHUNK = 1 << 20


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def shard_checksums(shard: Path) -> dict[str, str]:
    """SHA-256 of a shard's index (NAME.npz) and its features (NAME.features.npy)."""
    from benchbase.data.store import features_path

    return {"index": file_digest(shard), "features": file_digest(features_path(shard))}


def check_identity(out: Path, identity: dict) -> None:
    """Refuse to resume a preparation into a store made from another corpus or other settings.

    A preparation that failed before its first shard (too many pieces asked of the transcripts,
    say) left its identity and perhaps its vocabulary, but no features: its retry with corrected
    settings starts over in the same folder instead of being refused for features it never made."""
    path = out / IDENTITY_FILE
    if path.is_file():
        try:
            existing = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            existing = None
        if existing == identity:
            return
        if _holds_features(out):
            changed = [key for key in sorted(identity)
                       if not isinstance(existing, dict) or existing.get(key) != identity[key]]
            what = ", ".join(changed) or f"unreadable {IDENTITY_FILE}"
            raise InputError(f"{out}: already holds features of another corpus or other settings ({what} differ); "
                             "remove it or choose another --out")
        from benchbase.data.vocabulary import VOCABULARY_FILE

        for leftover in (path, out / VOCABULARY_FILE):
            leftover.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(identity, indent=2, sort_keys=True).encode()
    atomic_write_bytes(path, lambda handle: handle.write(text))


def _holds_features(out: Path) -> bool:
    """Whether a preparation wrote any shard (or finished) in ``out``."""
    from benchbase.data.store import STORE_FILE

    return (out / STORE_FILE).exists() or any(out.glob("*/shard-*"))


def verify_store(root: Path) -> list[str]:
    """Every problem with the store's shards (missing, truncated, altered), one line each; [] when sound."""
    description = _description(root)
    problems = []
    for subset, split in description.get("splits", {}).items():
        checksums = split.get("checksums")
        if not isinstance(checksums, dict):
            problems.append(f"{root}: subset {subset} has no checksums "
                            "(prepared by an older benchbase; prepare it again)")
            continue
        for shard, expected in checksums.items():
            problems += _shard_problems(root, shard, expected)
    vocabulary = description.get("vocabulary")
    if isinstance(vocabulary, dict):  # a store of pieces: its labels mean what this model file says
        path = root / str(vocabulary.get("file"))
        if not path.is_file():
            problems.append(f"{path}: vocabulary file missing")
        elif file_digest(path) != vocabulary.get("sha256"):
            problems.append(f"{path}: checksum mismatch (the vocabulary was altered since the store was prepared)")
    return problems


def verified_store(root: Path) -> None:
    """Verify the store unless this machine already did and nothing changed since; one-line error if unsound."""
    stamp = _stamp(root)
    stamp_file = root / STAMP_FILE
    try:
        if json.loads(stamp_file.read_text(encoding="utf-8")) == stamp:
            return
    except (OSError, ValueError):
        pass
    problems = verify_store(root)
    if problems:
        more = (f" (and {len(problems) - 1} more; `benchbase data verify {root}` lists them)"
                if len(problems) > 1 else "")
        raise InputError(problems[0] + more)
    text = json.dumps(stamp, sort_keys=True).encode()
    try:
        atomic_write_bytes(stamp_file, lambda handle: handle.write(text))
    except OSError:
        pass  # a read-only store is verified again next time, which costs time, not correctness


def _shard_problems(root: Path, shard: str, expected: dict) -> list[str]:
    from benchbase.data.store import features_path

    path = root / shard
    problems = []
    for part, file in (("index", path), ("features", features_path(path))):
        if not file.is_file():
            problems.append(f"{file}: shard file missing")
        elif file_digest(file) != expected.get(part):
            problems.append(f"{file}: checksum mismatch (truncated or altered since it was prepared)")
    return problems


def _description(root: Path) -> dict:
    from benchbase.data.store import STORE_FILE

    try:
        description = json.loads((root / STORE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise InputError(f"{root}: not a prepared feature store ({error})") from None
    if not isinstance(description, dict):
        raise InputError(f"{root / STORE_FILE}: not a store description")
    return description


def _stamp(root: Path) -> dict:
    """What a verification covered: every file's size, modification time, inode and inode change
    time (which, unlike the modification time, cannot be set back), on this machine. A copied or
    restored store has new inodes and change times, so it is verified again once."""
    files = sorted(path for path in root.rglob("*") if path.is_file() and path.name != STAMP_FILE)
    listing = []
    for path in files:
        status = path.stat()
        listing.append((str(path.relative_to(root)), status.st_size, status.st_mtime_ns, status.st_ino,
                        status.st_ctime_ns))
    return {"machine": platform.node(), "files": hashlib.sha256(json.dumps(listing).encode()).hexdigest()}

"""What every results store is and does: the ResultsStore interface, upload progress, which
files of a run directory go, and how secrets are kept out of the copies."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from runner.redact import REDACTED
from runner.store.url import StoreUrl

# Secret-looking --env values are replaced in the uploaded copy of every file up to this size
# (launch scripts hold them verbatim; a program may echo them into its log). Larger files are
# a program's outputs (checkpoints) and are uploaded as they are.
SCAN_LIMIT = 64 * 1024 * 1024


# Shorter values ("true", "1", "yes") would be replaced all over JSON and logs.
MIN_SECRET_LENGTH = 6


@dataclass(frozen=True)
class UploadProgress:
    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int


ProgressSink = Callable[[UploadProgress], None]


def _ignore_progress(progress: UploadProgress) -> None:
    pass


@dataclass(frozen=True)
class Upload:
    """A finished upload: where the run now is, and every object written."""

    url: str
    keys: tuple[str, ...]
    bytes: int


class ResultsStore(Protocol):
    """One store per URL scheme (see runner.store.s3.STORES)."""

    url: StoreUrl

    def preflight(self) -> None: ...

    def upload(
        self,
        run_dir: Path,
        on_progress: ProgressSink = _ignore_progress,
        secrets: Sequence[str] = (),
    ) -> Upload: ...


def files_to_upload(run_dir: Path) -> list[Path]:
    """Every regular file under ``run_dir``, sorted, without half-written temporaries.

    ``*.partial*`` are the atomic writes of runner/record/rundir.py caught mid-way;
    ``.write-test`` is the probe that checks the directory can be written. Symbolic links to
    directories are not followed (a program's working directory may link to a dataset).
    """
    found = []
    for root, dirs, names in os.walk(run_dir):
        dirs.sort()
        for name in sorted(names):
            path = Path(root) / name
            if ".partial" in name or name == ".write-test" or not path.is_file():
                continue
            found.append(path)
    return found


def redacted_body(path: Path, secrets: Sequence[bytes]) -> bytes | None:
    """The file's bytes with every secret replaced, or None when it holds none (or is huge)."""
    if not secrets or path.stat().st_size > SCAN_LIMIT:
        return None
    data = path.read_bytes()
    if not any(secret in data for secret in secrets):
        return None
    for secret in secrets:
        data = data.replace(secret, REDACTED.encode())
    return data


def secret_values(values: Sequence[str]) -> list[bytes]:
    """The values worth replacing: long enough not to be ordinary words, longest first."""
    chosen = {v.encode() for v in values if len(v) >= MIN_SECRET_LENGTH}
    return sorted(chosen, key=len, reverse=True)

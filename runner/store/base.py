"""What every results store is and does: the ResultsStore interface, upload progress, which
files of a run directory go, and how secrets are kept out of the copies."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dtrun.record.writer import LOCK_FILE
from dtrun.redact import Redactor
from dtrun.store.url import StoreUrl

# A file up to this size is redacted in memory; a larger one (a long node log, a checkpoint)
# is redacted a piece at a time into a temporary file, each piece ending at a line's end.
SCAN_LIMIT = 64 * 1024 * 1024

# What an upload sends for a file: its redacted bytes, a temporary file holding them (a large
# file), or None where the file goes as it is (nothing in it needed hiding).
Body = bytes | Path | None


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
    links: tuple[str, ...] = ()  # symbolic links left out (paths in the run), LINKS_FILE lists


class ResultsStore(Protocol):
    """One store per URL scheme (see dtrun.store.s3.STORES)."""

    url: StoreUrl

    def preflight(self) -> None: ...

    def upload(
        self,
        run_dir: Path,
        on_progress: ProgressSink = _ignore_progress,
        secrets: Sequence[str] = (),
    ) -> Upload: ...


_NOT_RESULTS = (".write-test", LOCK_FILE)


def files_to_upload(run_dir: Path) -> list[Path]:
    """Every regular file under ``run_dir``, sorted, without half-written temporaries."""
    return scan(run_dir)[0]


def scan(run_dir: Path) -> tuple[list[Path], list[Path]]:
    """The regular files under ``run_dir`` and its symbolic links, each sorted.

    ``*.partial*`` are the atomic writes of runner/record/rundir.py caught mid-way;
    ``.write-test`` is the probe that checks the directory can be written, ``.dtrun-writer``
    the writer's lock (runner/record/writer.py). A symbolic link,
    to a file or a directory, is no file of the run: a program's working directory may link
    to a dataset or a key, and the upload sends no link's target (S3 holds no links). The
    links are listed apart, so the upload can say it left them out.
    """
    found: list[Path] = []
    links: list[Path] = []
    for root, dirs, names in os.walk(run_dir):  # links to directories are not walked into
        dirs.sort()
        for name in sorted([*names, *dirs]):
            path = Path(root) / name
            try:
                mode = path.lstat().st_mode
            except FileNotFoundError:  # gone since the walk listed it
                continue
            if stat.S_ISLNK(mode):
                links.append(path)
            elif stat.S_ISREG(mode) and ".partial" not in name and name not in _NOT_RESULTS:
                found.append(path)
    return found, links


def link_notes(run_dir: Path, links: Sequence[Path], hide: Redactor) -> bytes:
    """``symlinks.json``: the links the upload left out, where each pointed (redacted)."""
    import json

    notes = [
        {"path": link.relative_to(run_dir).as_posix(), "target": _target(link, hide)}
        for link in links
    ]
    record = {"schema": LINKS_SCHEMA, "why": LINKS_WHY, "links": notes}
    return (json.dumps(record, indent=2) + "\n").encode()


def _target(link: Path, hide: Redactor) -> str:
    try:
        target = str(link.readlink()).encode(errors="surrogateescape")
    except OSError:
        return ""
    return hide.body(target).decode(errors="replace")


LINKS_FILE = "symlinks.json"
LINKS_SCHEMA = "dtrun.symlinks/1"
LINKS_WHY = (
    "symbolic links in the run directory are not uploaded: S3 holds no links, and a link's "
    "target (a dataset, a key) is not the run's"
)


def redacted_body(path: Path, hide: Redactor, spill: Path) -> Body:
    """The file's bytes as they may leave this machine, or None when they need no change. A
    file over SCAN_LIMIT is redacted a piece at a time into a file under ``spill`` (a
    temporary directory the caller removes), so no size of log goes up unredacted."""
    if path.lstat().st_size <= SCAN_LIMIT:
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as source:
            data = source.read()  # a link made since the scan is refused, not followed
        body = hide.body(data)
        return None if body == data else body
    changed = False
    fd, name = tempfile.mkstemp(dir=spill)
    with (
        os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as source,
        os.fdopen(fd, "wb") as out,
    ):
        rest = b""
        while True:
            chunk = source.read(SCAN_LIMIT)
            data = rest + chunk
            # a piece ends at a line's end, so no line is cut; a binary file with no line end
            # for four limits' worth is cut there (it is matched as bytes, not lines)
            cut = data.rfind(b"\n") + 1 if chunk else len(data)
            if chunk and not cut:
                if len(data) < 4 * SCAN_LIMIT:
                    rest = data
                    continue
                cut = len(data)
            piece, rest = data[:cut], data[cut:]
            if chunk and piece.endswith(b"\n"):
                piece, rest = _carry(piece, rest, hide)
                changed = changed or not data.startswith(piece + rest.partition(b"\n")[0])
            body = hide.body(piece)
            changed = changed or body != piece
            out.write(body)
            if not chunk:
                break
    if not changed:
        Path(name).unlink()
        return None
    return Path(name)


def _carry(piece: bytes, rest: bytes, hide: Redactor) -> tuple[bytes, bytes]:
    """A piece less its last lines, which go on with the next (``rest``): its last line, and
    the line before while that one or the first carried may lie wholly inside a secret cut
    over three lines or more (``_inside``). The two lines at the break left are masked where
    it cuts a secret (``Redactor.seam``): no piece ends at a line whose next lines it cannot
    see."""
    start = piece.rfind(b"\n", 0, len(piece) - 1) + 1  # where the carried lines start
    for _ in range(max(map(len, hide.wrapped), default=0)):  # no cut spans more lines
        if not start:
            break
        before = piece.rfind(b"\n", 0, start - 1) + 1  # where the line before them starts
        first = piece[start : piece.index(b"\n", start)]
        if not (_inside(first, hide) or _inside(piece[before : start - 1], hide)):
            break
        start = before
    if not start:
        return b"", piece + rest
    head, newline, line = piece[: start - 1].rpartition(b"\n")
    first, _, after = piece[start:].partition(b"\n")
    text = line.decode(errors="surrogateescape"), first.decode(errors="surrogateescape")
    if hide.started(text[0]):
        line, first = (part.encode(errors="surrogateescape") for part in hide.seam(*text))
    return head + newline + line + b"\n", first + b"\n" + after + rest


def _inside(line: bytes, hide: Redactor) -> bool:
    """Whether ``line``, its indent and trailing white space aside, may be wholly a middle part
    of a secret cut by line breaks (a blank line may be one too: cuts.py reads over it)."""
    text = line.decode(errors="surrogateescape").strip()
    return any(text in form for form in hide.wrapped)


# What a run directory's records are, for a copy made without dtrun: they are written
# redacted (aws s3 sync filters: the last matching one wins, * matches across /).
_RECORDS = (
    "manifest.json", "runs.json", "run.json", "summary.json", "health.json", "report.md",
    "report.html", "*.png", "n*/r*/result.json",
)  # fmt: skip


def redacted_copy(run_dir: Path, bodies: Mapping[Path, Body]) -> Path:
    """A copy of ``run_dir`` as an upload sends it, beside it (``<run-id>.redacted-XXXX``, mode
    0700): each file of ``bodies`` redacted where its body is given, else a hard link to it (a
    copy where links cannot be made). For an upload that failed: the run directory itself
    holds the --env values verbatim in its launch scripts, so it must not be synced as it is."""
    copy = Path(tempfile.mkdtemp(prefix=f"{run_dir.name}.redacted-", dir=run_dir.parent))
    try:
        for path, body in bodies.items():
            _copy_one(path, body, copy / path.relative_to(run_dir))
    except BaseException:
        # half a copy (a full disk: a file empty, the rest missing) is no copy to sync, and
        # it holds what space the disk had left
        shutil.rmtree(copy, ignore_errors=True)
        raise
    return copy


def _copy_one(path: Path, body: Body, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(body, Path):  # a large file's redacted copy, made for the upload
        shutil.copyfile(body, target)
        target.chmod(path.stat().st_mode & 0o777)
        return
    if body is not None:  # a redacted file, or the upload's own symlinks.json
        mode = path.lstat().st_mode & 0o777 if path.name != LINKS_FILE else 0o644
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with os.fdopen(os.open(target, flags, mode), "wb") as out:
            out.write(body)
        return
    try:
        os.link(path, target, follow_symlinks=False)
    except OSError:
        shutil.copyfile(path, target, follow_symlinks=False)


def copy_hint(run_dir: Path, url: str, bodies: Mapping[Path, Body]) -> str:
    """How to copy a run whose upload failed without sending a secret: its redacted copy, or
    its records alone when no copy can be made."""
    try:
        copy = redacted_copy(run_dir, bodies)
    except OSError as exc:
        records = " ".join(f"--include '{pattern}'" for pattern in _RECORDS)
        return (
            f"no redacted copy could be made ({exc.strerror or exc}), and {run_dir} holds the "
            f"--env values verbatim in its launch scripts and logs: copy its records alone "
            f"with `aws s3 sync {run_dir} {url} --exclude '*' {records}`"
        )
    return (
        f"a copy with the secrets redacted, as the upload sends it, is in {copy}: "
        f"copy it later with `aws s3 sync {copy} {url}` (not {run_dir} itself, whose launch "
        "scripts hold the --env values verbatim)"
    )

"""`--results URL` on `dtrun bench` and `dtrun run`: check the store first, upload the run last.

    store = check_results(results, dry_run=dry_run)        # after the input is validated
    with upload_after(store, output / run_id, command_secrets(spec)):  # around cluster and run
        ...

The store is checked before any cluster is built or any directory made, so a missing
credential costs seconds, not a sweep. The upload happens however the run ends (complete,
failed, interrupted); after a failure the original error is still the one dtrun exits with.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from dtrun.cli.common import console, print_error
from dtrun.cli.inert import styled
from dtrun.errors import UploadError
from dtrun.spec.text import plural

if TYPE_CHECKING:
    from dtrun.store.base import ResultsStore, UploadProgress


def check_results(url: str | None, *, dry_run: bool) -> ResultsStore | None:
    """The store --results names, its credentials and bucket checked; None without --results.

    A dry run only checks the URL: it prints plans and contacts nothing, S3 included (the
    real run checks the store before it starts anything).
    """
    if url is None:
        return None
    from dtrun.store.s3 import open_store
    from dtrun.store.url import parse_results_url

    store = open_store(parse_results_url(url))
    if dry_run:
        return None
    store.preflight()
    return store


@contextmanager
def upload_after(
    store: ResultsStore | None, run_dir: Path, secrets: Sequence[str]
) -> Iterator[None]:
    """Upload ``run_dir`` when the block ends, if the block made it; re-raise what it raised.

    A directory that existed before is never uploaded: it is another run's (dtrun refuses to
    write into it). ``secrets`` (every value the command was given as secret: --env values,
    program arguments, URL credentials and tokens) are redacted in the copies. A link on the
    way is followed once, now, as create_run_dir follows it: the run uploaded is the one
    written, wherever the link points by the end.
    """
    if store is None:
        yield
        return
    from dtrun.record.rundir import resolved_once

    run_dir = resolved_once(run_dir)
    existed = run_dir.exists()
    try:
        yield
    except BaseException:
        if not existed and run_dir.is_dir():
            try:
                _upload(store, run_dir, secrets)
            except UploadError as exc:
                # The run's own error is the one to exit with; say what became of the copy.
                _say_error(exc.message)
        raise
    if not existed and run_dir.is_dir():
        _upload(store, run_dir, secrets)


def _upload(store: ResultsStore, run_dir: Path, secrets: Sequence[str]) -> None:
    """Upload with a progress bar (files and bytes), then print where the run now is."""
    from rich.filesize import decimal
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    out = console()
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        TextColumn("{task.fields[files]}", markup=False),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=out,
        auto_refresh=out.is_terminal,  # as the sweep's bar: logs and pipes get the final state
    )
    task = progress.add_task(f"uploading to {store.url}", total=None, files="")

    def on_progress(done: UploadProgress) -> None:
        progress.update(
            task,
            completed=done.bytes_done,
            total=done.bytes_total,
            files=f"{done.files_done}/{done.files_total} files",
        )

    with progress:
        upload = store.upload(run_dir, on_progress, secrets)
    out.print(
        styled(
            ("uploaded", "green"),
            f" {len(upload.keys)} files ({decimal(upload.bytes)}) to {upload.url}",
        ),
        soft_wrap=True,
    )
    if upload.links:
        from dtrun.store.base import LINKS_FILE

        shown = ", ".join(upload.links[:5]) + (", ..." if len(upload.links) > 5 else "")
        out.print(
            styled(
                ("not uploaded", "yellow"),
                f": {plural(len(upload.links), 'symbolic link')} ({shown}): S3 holds no links, "
                f"and no link's target is sent; {LINKS_FILE} in the upload lists them",
            ),
            soft_wrap=True,
        )


def _say_error(message: str) -> None:
    print_error(message)

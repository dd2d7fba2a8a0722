"""Where a finished run directory goes besides runs/<run-id>/: `--results s3://bucket/prefix`.

The local run directory is always the primary copy; a store only ever receives a copy of it,
and nothing here deletes or changes a local file. The URL is parsed first (runner/store/url.py);
``S3Store`` acts: ``preflight()`` before the run (credentials from boto3's usual chain, the
  bucket reachable and ours to use) so a bad store fails in seconds, not after the sweep;
  ``upload()`` after it, every file under the run directory to ``prefix/<run-id>/<path>``.

boto3 is imported inside the methods that use it, so `dtrun --help` stays fast. Nothing here
prints: progress is reported through a callback and failures as StoreError.
"""

from __future__ import annotations

import io
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dtrun.errors import StoreError, UploadError, UploadInterruptedError
from dtrun.execute import WAKE_S
from dtrun.extras import need
from dtrun.redact import Redactor
from dtrun.store.base import (
    LINKS_FILE,
    Body,
    ProgressSink,
    ResultsStore,
    Upload,
    UploadProgress,
    _ignore_progress,
    copy_hint,
    link_notes,
    redacted_body,
    scan,
)
from dtrun.store.url import StoreUrl, _is_aws

if TYPE_CHECKING:
    from boto3.session import Session
    from botocore.exceptions import ClientError
    from mypy_boto3_s3.client import S3Client
    from s3transfer.futures import TransferFuture
    from s3transfer.subscribers import BaseSubscriber


# Content types a browser or the S3 console should show rather than download; anything else
# is stored as S3's default binary/octet-stream.
CONTENT_TYPES = {
    ".json": "application/json",
    ".md": "text/markdown; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".png": "image/png",
    ".log": "text/plain; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".sh": "text/x-shellscript; charset=utf-8",
}


# 403 answers: HEAD requests carry no body, so S3 gives only the status as the code.
_DENIED = {
    "403", "AccessDenied", "Forbidden", "AllAccessDisabled", "InvalidAccessKeyId",
    "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "TokenRefreshRequired",
}  # fmt: skip


_MISSING = {"404", "NoSuchBucket", "NotFound"}


_CREDENTIALS_HELP = (
    "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE=NAME for a profile "
    "of ~/.aws/config (`aws configure --profile NAME`, `aws sso login --profile NAME`); "
    "or leave --results out to keep the run in runs/ only"
)


class _Tally:
    """Progress of one upload, added to from the transfer threads."""

    def __init__(self, files_total: int, bytes_total: int, on_progress: ProgressSink) -> None:
        self._lock = threading.Lock()
        self._on_progress = on_progress
        self.files_done = 0
        self.files_total = files_total
        self.bytes_done = 0
        self.bytes_total = bytes_total

    def add(self, nbytes: int = 0, files: int = 0) -> None:
        with self._lock:
            # A retried part rewinds with a negative count; never show less than nothing.
            self.bytes_done = max(0, self.bytes_done + nbytes)
            self.files_done += files
            snapshot = UploadProgress(
                self.files_done, self.files_total, self.bytes_done, self.bytes_total
            )
        self._on_progress(snapshot)


def _subscriber(tally: _Tally) -> BaseSubscriber:
    from s3transfer.subscribers import BaseSubscriber

    class Subscriber(BaseSubscriber):
        def on_progress(self, future: TransferFuture, bytes_transferred: int, **_: Any) -> None:
            tally.add(nbytes=bytes_transferred)

        def on_done(self, future: TransferFuture, **_: Any) -> None:
            tally.add(files=1)

    return Subscriber()


class S3Store:
    """An S3 bucket (or an S3-compatible store at AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL).

    Credentials come from boto3's default chain: environment variables, AWS_PROFILE and the
    shared files, SSO, container and instance roles.
    """

    def __init__(self, url: StoreUrl) -> None:
        self.url = url
        self._session: Session | None = None
        self._client: S3Client | None = None

    def client(self) -> S3Client:
        return self._boto()[1]

    def _boto(self) -> tuple[Session, S3Client]:
        """A session on boto3's default chain, and its S3 client, made once."""
        need("boto3.session", "s3")  # exit 2 naming dtrun[s3] where it is missing
        import boto3.session
        from botocore.exceptions import BotoCoreError

        try:
            if self._session is None:
                self._session = boto3.session.Session()
            if self._client is None:
                self._client = self._session.client("s3")
        except BotoCoreError as exc:
            raise self._credentials_error(exc) from None
        return self._session, self._client

    def preflight(self) -> None:
        """Credentials found, the bucket exists and they may use it; else a StoreError."""
        need("boto3.session", "s3")
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        session, client = self._boto()
        try:
            credentials = session.get_credentials()
        except BotoCoreError as exc:
            raise self._credentials_error(exc) from None
        if credentials is None:
            raise self._credentials_error(NoCredentialsError())
        try:
            client.head_bucket(Bucket=self.url.bucket)
        except ClientError as exc:
            raise self._bucket_error(exc) from None
        except BotoCoreError as exc:
            raise self._transport_error(exc) from None

    def upload(
        self,
        run_dir: Path,
        on_progress: ProgressSink = _ignore_progress,
        secrets: Sequence[str] = (),
    ) -> Upload:
        """Copy every file of ``run_dir`` to ``prefix/<run-id>/``; the local files stay.

        Every fragment of ``secrets`` (every value the command was given as secret), URL
        credentials and token shapes are replaced by <redacted> in the copies (runner/redact/).
        Every file is tried; then a failure raises UploadError naming how many did not go, and
        leaves a redacted copy to send later.
        """
        files, links = scan(run_dir)
        hide = Redactor.of(secrets)
        with tempfile.TemporaryDirectory(prefix="dtrun-upload-") as spill:
            try:
                bodies = {path: redacted_body(path, hide, Path(spill)) for path in files}
                if links and (notes := run_dir / LINKS_FILE) not in bodies:
                    # no link goes up, nor its target: the run's copy lists them instead
                    bodies[notes] = link_notes(run_dir, links, hide)
                    files = [*files, notes]
            except OSError as exc:  # a full temporary disk, a file that went away
                raise UploadError(
                    f"cannot make the redacted copies to upload {run_dir.name}",
                    why=f"{exc.filename or spill}: {exc.strerror or exc}",
                    fix=f"the local copy is kept in {run_dir}; free space in "
                    f"{tempfile.gettempdir()} (or point "
                    "TMPDIR at a larger disk) and run again; do not sync the run directory as "
                    "it is: its launch scripts hold the --env values verbatim",
                ) from None
            sent = self._send(run_dir, files, bodies, on_progress)
            return replace(
                sent, links=tuple(link.relative_to(run_dir).as_posix() for link in links)
            )

    def _send(
        self,
        run_dir: Path,
        files: list[Path],
        bodies: Mapping[Path, Body],
        on_progress: ProgressSink,
    ) -> Upload:
        from boto3.s3.transfer import TransferConfig, create_transfer_manager

        run_id = run_dir.name
        sizes = {
            path: len(body) if isinstance(body, bytes) else (body or path).stat().st_size
            for path, body in bodies.items()
        }
        tally = _Tally(len(files), sum(sizes.values()), on_progress)
        tally.add()
        # Files go up several at a time (runs are many small logs and JSON files); a large
        # one goes in 8 MiB parts, also several at a time.
        config = TransferConfig(max_concurrency=8, use_threads=True)
        futures: dict[str, TransferFuture] = {}
        keys = {path: self.url.key(run_id, path.relative_to(run_dir).as_posix()) for path in files}
        manager = create_transfer_manager(self.client(), config)
        try:
            for path, body in bodies.items():
                kind = CONTENT_TYPES.get(path.suffix)
                extra = {"ContentType": kind} if kind else {}
                source = io.BytesIO(body) if isinstance(body, bytes) else str(body or path)
                futures[keys[path]] = manager.upload(
                    source, self.url.bucket, keys[path], extra, [_subscriber(tally)]
                )
            failures = self._wait(futures)
        except KeyboardInterrupt:
            manager.shutdown(cancel=True, cancel_msg="interrupted by the user (Ctrl-C)")
            raise UploadInterruptedError(
                f"upload to {self.url.run_url(run_id)} interrupted",
                why=f"{tally.files_done} of {len(files)} files were uploaded",
                fix=f"the local copy is kept in {run_dir}; {self._copy_hint(run_dir, bodies)}",
            ) from None
        manager.shutdown()
        if failures:
            key, error = failures[0]
            raise UploadError(
                f"{len(failures)} of {len(files)} files did not upload to "
                f"{self.url.run_url(run_id)}",
                why=f"{key}: {error}",
                fix=f"the local copy is kept in {run_dir}; {self._copy_hint(run_dir, bodies)}",
            )
        return Upload(self.url.run_url(run_id), tuple(futures), sum(sizes.values()))

    def _copy_hint(self, run_dir: Path, bodies: Mapping[Path, Body]) -> str:
        return copy_hint(run_dir, self.url.run_url(run_dir.name), bodies)

    @staticmethod
    def _wait(futures: dict[str, TransferFuture]) -> list[tuple[str, str]]:
        from botocore.exceptions import BotoCoreError, ClientError
        from s3transfer.exceptions import S3UploadFailedError

        failures = []
        for key, future in futures.items():
            while not future.done():  # a stop a transfer thread takes is handled meanwhile
                time.sleep(WAKE_S)  # (dtrun.execute: a TransferFuture takes no timeout)
            try:
                future.result()
            except ClientError as exc:
                failures.append((key, _client_error_text(exc)))
            except (BotoCoreError, S3UploadFailedError, OSError) as exc:
                failures.append((key, str(exc)))
        return failures

    def _credentials_error(self, exc: Exception) -> StoreError:
        from botocore.exceptions import NoCredentialsError, ProfileNotFound

        if isinstance(exc, ProfileNotFound):
            return StoreError(
                f"cannot use --results {self.url}: {exc}",
                why="AWS_PROFILE (or --profile in the config) names a profile that "
                "~/.aws/config and ~/.aws/credentials do not define",
                fix="`aws configure --profile NAME`, or unset AWS_PROFILE",
            )
        if isinstance(exc, NoCredentialsError):
            return StoreError(
                f"no AWS credentials for --results {self.url}",
                why="boto3 found none in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, "
                "~/.aws/credentials, ~/.aws/config, nor a container or instance role; "
                "nothing was run",
                fix=_CREDENTIALS_HELP,
            )
        return StoreError(
            f"the AWS credentials for --results {self.url} could not be loaded",
            why=f"{exc}; nothing was run",
            fix=_CREDENTIALS_HELP,
        )

    def _bucket_error(self, exc: ClientError) -> StoreError:
        code = _error_code(exc)
        bucket = self.url.bucket
        if code in _MISSING:
            return StoreError(
                f"no bucket {bucket} for --results {self.url}",
                why=f"{self._where()} answered {code}: the bucket does not exist; nothing was run",
                fix=f"create it (`aws s3 mb s3://{bucket}`) or correct the name in --results",
            )
        if code in _DENIED:
            return StoreError(
                f"access denied to bucket {bucket} for --results {self.url}",
                why=f"{self._where()} answered {code} to {self._identity()}; nothing was run",
                fix="allow s3:ListBucket and s3:PutObject on the bucket for that identity, "
                "or use credentials that have them (AWS_PROFILE=NAME)",
            )
        return StoreError(
            f"cannot use bucket {bucket} for --results {self.url}",
            why=f"{self._where()} answered {_client_error_text(exc)}; nothing was run",
            fix="check the bucket name, AWS_DEFAULT_REGION and, for an S3-compatible store, "
            "AWS_ENDPOINT_URL_S3",
        )

    def _transport_error(self, exc: Exception) -> StoreError:
        return StoreError(
            f"cannot reach {self._where()} for --results {self.url}",
            why=f"{exc}; nothing was run",
            fix="check the network; for an S3-compatible store, check AWS_ENDPOINT_URL_S3 "
            "(or AWS_ENDPOINT_URL)",
        )

    def _where(self) -> str:
        endpoint = self.client().meta.endpoint_url
        return "S3" if _is_aws(endpoint) else f"the S3 endpoint {endpoint}"

    def _identity(self) -> str:
        """Who the credentials are, when STS says so quickly; never a key or a secret."""
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError

        session, client = self._boto()
        if not _is_aws(client.meta.endpoint_url):
            return "these credentials"  # an S3-compatible store has no AWS STS to ask
        quick = Config(connect_timeout=3, read_timeout=5, retries={"total_max_attempts": 1})
        try:
            arn = session.client("sts", config=quick).get_caller_identity()["Arn"]
        except ClientError as exc:
            return f"credentials that STS rejects too ({_error_code(exc)})"
        except BotoCoreError:
            return "these credentials"
        return arn


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", "")) or "an error"


def _client_error_text(exc: ClientError) -> str:
    error = exc.response.get("Error", {})
    code, message = error.get("Code", ""), error.get("Message", "")
    return f"{code}: {message}" if message else str(code or exc)


# URL scheme -> store. The local run directory needs no entry: it is always written.
STORES: dict[str, Callable[[StoreUrl], ResultsStore]] = {"s3": S3Store}


def open_store(url: StoreUrl) -> ResultsStore:
    return STORES[url.scheme](url)

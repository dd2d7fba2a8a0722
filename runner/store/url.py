"""`--results URL`, parsed and checked before anything else happens. Pure."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from dtrun.errors import UsageError
from dtrun.redact import REDACTED

SCHEMES = ("s3",)  # the keys of dtrun.store.s3.STORES (a test keeps them equal)
# Bucket names: 3-63 characters of lowercase letters, digits, '.' and '-', starting and ending
# with a letter or digit (the rules of AWS S3, which S3-compatible stores follow).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z")
# A prefix's characters that S3's "Object key naming guidelines" (Amazon S3 User Guide,
# docs/bench.md "Results in S3") list under "Characters to avoid", and the control characters
# 00-1F and 7F, which S3's XML requests normalise (a \r becomes \n).
_AVOIDED = re.compile(r'[\x00-\x1f\x7f\\{}^%`\[\]"<>~#|]')
PREFIX_MOST = 512  # bytes of UTF-8: a key is at most 1,024, and the run id and paths follow
# USER:PASSWORD@ or USER@ before the bucket (the password may hold / and @): a bucket name
# holds neither : nor @, and a key may hold @ only after the first /.
_CREDENTIALS = re.compile(r"(?:[^/@]*:.*|[^/@:]+)@(?P<rest>[^@]*)\Z", re.DOTALL)


@dataclass(frozen=True)
class StoreUrl:
    """``s3://bucket/prefix``: where runs go, each under ``prefix/<run-id>/``."""

    scheme: str
    bucket: str
    prefix: str = ""  # without leading or trailing '/'; may be empty

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.prefix}".rstrip("/")

    def key(self, run_id: str, relative: str = "") -> str:
        return "/".join(part for part in (self.prefix, run_id, relative) if part)

    def run_url(self, run_id: str) -> str:
        """``s3://bucket/prefix/<run-id>/``, the URL printed when the upload is done."""
        return f"{self.scheme}://{self.bucket}/{self.key(run_id)}/"


def parse_results_url(text: str) -> StoreUrl:
    """``s3://bucket/some/prefix`` -> StoreUrl; anything else is a UsageError saying why."""
    scheme, sep, rest = text.partition("://")
    credentials = _CREDENTIALS.match(rest if sep else text)
    if credentials:  # said before anything that would show the URL, and never shown
        plain = f"{scheme}://{credentials['rest']}" if sep else f"s3://{credentials['rest']}"
        raise UsageError(
            f"--results {(scheme + '://' if sep else '') + REDACTED}@... holds credentials",
            why="a store URL takes no user or password: boto3 reads the credentials from "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE or a role",
            fix=f"pass --results {plain} and export AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE=NAME)",
        )
    if not sep:
        guess = f"s3://{text.lstrip('/')}" if text and ":" not in text else "s3://bucket/prefix"
        raise UsageError(
            f"--results {text!r} is not a store URL",
            why="it names no scheme",
            fix=f"pass --results s3://BUCKET/PREFIX, e.g. --results {guess}",
        )
    if scheme.lower() in ("s3a", "s3n", "https", "http"):
        raise UsageError(
            f"--results {text!r} is not an s3:// URL",
            why=f"{scheme}:// is another tool's spelling; boto3 takes the bucket and prefix",
            fix="pass --results s3://BUCKET/PREFIX (an S3-compatible endpoint goes in "
            "AWS_ENDPOINT_URL_S3)",
        )
    if scheme != "s3":
        raise UsageError(
            f"--results {text!r} names a store dtrun cannot write",
            why=f"supported: {', '.join(f'{name}://' for name in SCHEMES)}",
            fix="pass --results s3://BUCKET/PREFIX, or leave --results out to keep runs/ only",
        )
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise UsageError(
            f"--results {text!r} names no bucket",
            fix="pass --results s3://BUCKET/PREFIX, e.g. --results s3://my-results/dtrun",
        )
    problem = bucket_name_problem(bucket)
    if problem:
        raise UsageError(
            f"--results {text!r}: {bucket!r} is not a valid bucket name",
            why=problem,
            fix="pass the bucket's exact name, e.g. --results s3://my-results/dtrun",
        )
    prefix = prefix.strip("/")
    problem = prefix_problem(prefix)
    if problem:
        raise UsageError(
            f"--results {text!r}: the prefix {prefix!r} is not one to name S3 objects by",
            why=problem,
            fix="pass a prefix of letters, digits and / - _ . ! * ( ), e.g. "
            f"--results s3://{bucket}/dtrun",
        )
    return StoreUrl(scheme, bucket, prefix)


def prefix_problem(prefix: str) -> str:
    """Why ``prefix`` should not begin S3 object keys, or "" when it may."""
    found = _AVOIDED.search(prefix)
    if found:
        return f"it holds {found.group()!r}, a character S3's key naming guidelines say to avoid"
    segment = next((part for part in prefix.split("/") if part in ("", ".", "..")), None)
    if prefix and segment is not None:
        shown = "an empty segment ('//')" if not segment else f"a {segment!r} segment"
        return (
            f"it holds {shown}: S3 keeps it in every key as written (no folder is left or "
            "entered), and a copy of the runs to disk (aws s3 sync) would leave its folder "
            "or name one with nothing"
        )
    if len(prefix.encode()) > PREFIX_MOST:
        return (
            f"it is {len(prefix.encode()):,} bytes long; S3 keys are at most 1,024 and the run "
            f"id and file paths follow it, so dtrun takes at most {PREFIX_MOST}"
        )
    return ""


def bucket_name_problem(bucket: str) -> str:
    """Why ``bucket`` cannot be an S3 bucket name, or "" when it can."""
    if not 3 <= len(bucket) <= 63:
        return f"bucket names have 3 to 63 characters, not {len(bucket)}"
    if not _BUCKET.match(bucket):
        return (
            "bucket names hold lowercase letters, digits, '.' and '-' only, "
            "and start and end with a letter or digit"
        )
    if ".." in bucket:
        return "bucket names have no two '.' in a row"
    try:
        ipaddress.IPv4Address(bucket)
    except ValueError:
        return ""
    return "a bucket name cannot be an IP address"


def _is_aws(endpoint: str) -> bool:
    host = endpoint.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
    return host.endswith((".amazonaws.com", ".amazonaws.com.cn"))

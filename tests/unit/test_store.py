"""The results store: --results URLs, the preflight before a run, the upload after it.

S3 is moto's in-process S3; access is denied by real IAM policies that moto evaluates.
"""

from __future__ import annotations

import json
import socket
import stat
import tempfile

import pytest
from moto.core.authorization import enable_iam_authentication

from dtrun.errors import StoreError, UploadError, UsageError
from dtrun.store.base import UploadProgress, files_to_upload
from dtrun.store.s3 import STORES, S3Store
from dtrun.store.url import SCHEMES, StoreUrl, parse_results_url
from tests.aws import ACCOUNT, BUCKET, LIST_ONLY, stored, user_keys
from tests.conftest import fill


@pytest.mark.parametrize(
    ("text", "bucket", "prefix"),
    [
        ("s3://results/dtrun", "results", "dtrun"),
        ("s3://results/team/a/", "results", "team/a"),
        ("s3://results", "results", ""),
        ("s3://results/", "results", ""),
        ("s3://my.results-2", "my.results-2", ""),
    ],
)
def test_an_s3_url_names_a_bucket_and_a_prefix(text, bucket, prefix):
    assert parse_results_url(text) == StoreUrl("s3", bucket, prefix)


def test_each_run_goes_under_the_prefix_in_a_directory_of_its_own():
    url = parse_results_url("s3://results/team/a/")
    assert url.key("r1", "n2/r0/result.json") == "team/a/r1/n2/r0/result.json"
    assert url.run_url("r1") == "s3://results/team/a/r1/"
    assert parse_results_url("s3://results").run_url("r1") == "s3://results/r1/"


@pytest.mark.parametrize(
    ("prefix", "said"),
    [
        ("team/a\nb", "it holds '\\n'"),  # a line break: S3's XML requests normalise it
        ("runs/\x1b[2J", "it holds '\\x1b'"),  # a terminal escape, printed with the URL
        ("a%2F..%2Fb", "it holds '%'"),
        ("x#frag", "it holds '#'"),
        ("a" * 513, "it is 513 bytes long"),
    ],
)
def test_a_prefix_s3_s_key_guidelines_say_to_avoid_is_refused(prefix, said):
    with pytest.raises(UsageError) as caught:
        parse_results_url(f"s3://results/{prefix}")
    assert said in str(caught.value)
    assert "a character S3's key naming guidelines say to avoid" in str(caught.value) or (
        "S3 keys are at most 1,024" in str(caught.value)
    )
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    ("prefix", "said"),
    [("a/../b", "a '..' segment"), ("..", "a '..' segment"), ("a//b", "an empty segment"),
     ("./x", "a '.' segment")],
)  # fmt: skip
def test_a_prefix_with_an_empty_dot_or_dot_dot_segment_is_refused(prefix, said):
    with pytest.raises(UsageError) as caught:
        parse_results_url(f"s3://results/{prefix}/")
    assert said in str(caught.value) and caught.value.exit_code == 2


@pytest.mark.parametrize("prefix", ["team/dtrun_runs-1.(x)!*", "a" * 512, "it's/$(x)@y=z"])
def test_a_prefix_of_safe_or_merely_special_characters_is_taken(prefix):
    assert parse_results_url(f"s3://results/{prefix}").prefix == prefix


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("results/dtrun", "names no scheme"),
        ("results/dtrun", "--results s3://results/dtrun"),
        ("gs://results/dtrun", "names a store dtrun cannot write"),
        ("s3a://results/dtrun", "another tool's spelling"),
        ("https://results.s3.amazonaws.com/x", "is not an s3:// URL"),
        ("s3:///dtrun", "names no bucket"),
        ("s3://Results/dtrun", "lowercase letters, digits"),
        ("s3://my_results", "lowercase letters, digits"),
        ("s3://ab", "3 to 63 characters, not 2"),
        ("s3://a..b", "no two '.' in a row"),
        ("s3://192.168.1.10", "cannot be an IP address"),
        ("s3://-results", "start and end with a letter or digit"),
    ],
)
def test_a_bad_url_is_a_usage_error_that_says_why(text, message):
    with pytest.raises(UsageError) as caught:
        parse_results_url(text)
    assert message in caught.value.message
    assert caught.value.exit_code == 2


def test_preflight_passes_with_credentials_and_a_bucket(s3):
    S3Store(parse_results_url(f"s3://{BUCKET}/dtrun")).preflight()


def test_preflight_without_credentials_names_the_ways_to_give_them(no_aws_credentials):
    with pytest.raises(StoreError) as caught:
        S3Store(parse_results_url(f"s3://{BUCKET}/dtrun")).preflight()
    error = caught.value
    assert error.what == f"no AWS credentials for --results s3://{BUCKET}/dtrun"
    for way in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "aws sso login", "leave --results out"):
        assert way in error.message
    assert error.exit_code == 2


def test_an_unknown_profile_is_named(no_aws_credentials, monkeypatch):
    monkeypatch.setenv("AWS_PROFILE", "nosuch")
    with pytest.raises(StoreError) as caught:
        S3Store(parse_results_url(f"s3://{BUCKET}")).preflight()
    assert "nosuch" in caught.value.message
    assert "unset AWS_PROFILE" in caught.value.message


def test_a_missing_bucket_is_named(s3):
    with pytest.raises(StoreError) as caught:
        S3Store(parse_results_url("s3://no-such-bucket/dtrun")).preflight()
    assert caught.value.what == "no bucket no-such-bucket for --results s3://no-such-bucket/dtrun"
    assert "aws s3 mb s3://no-such-bucket" in caught.value.message


def test_access_denied_names_the_bucket_and_who_was_denied(s3, monkeypatch):
    for name, value in user_keys("reader", actions=[]).items():
        monkeypatch.setenv(name, value)
    with enable_iam_authentication(), pytest.raises(StoreError) as caught:
        S3Store(parse_results_url(f"s3://{BUCKET}/dtrun")).preflight()
    error = caught.value
    assert error.what == f"access denied to bucket {BUCKET} for --results s3://{BUCKET}/dtrun"
    assert f"arn:aws:iam::{ACCOUNT}:user/reader" in error.why
    assert "s3:ListBucket and s3:PutObject" in error.fix


def test_credentials_s3_does_not_know_are_denied_too(s3, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAUNKNOWNUNKNOWN00")
    with enable_iam_authentication(), pytest.raises(StoreError) as caught:
        S3Store(parse_results_url(f"s3://{BUCKET}")).preflight()
    assert caught.value.what.startswith(f"access denied to bucket {BUCKET}")
    assert "STS rejects too" in caught.value.why


def test_an_s3_compatible_endpoint_from_the_environment_is_used(aws_env, monkeypatch):
    # A bound socket that does not listen: connecting to it is refused at once.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "minio")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "minio-secret")
        with pytest.raises(StoreError) as caught:
            S3Store(parse_results_url(f"s3://{BUCKET}")).preflight()
    assert (
        caught.value.what == f"cannot reach the S3 endpoint {endpoint} for --results s3://results"
    )
    assert "AWS_ENDPOINT_URL_S3" in caught.value.fix
    assert "minio-secret" not in caught.value.message


@pytest.fixture
def run_dir(tmp_path):
    """A run directory as a sweep leaves it, with a temporary caught mid-write."""
    run = tmp_path / "runs" / "r1"
    files = {
        "manifest.json": '{"schema": "dtrun.manifest/1"}\n',
        "summary.json": '{"rows": []}\n',
        "report.md": "# Scaling report\n",
        "throughput.png": "\x89PNG fake",
        "plan/n1/node-0.sh": "#!/bin/bash\nexport HF_TOKEN=hunter2-token\n",
        "n1/r0/node-0.log": "step 3/3\n",
        "n1/r0/result.json": '{"tokens_per_s": 10}\n',
        "runs.json.partial": "{",
        ".dtrun-writer": "",  # the writer's lock (runner/record/writer.py): no result
    }
    for name, text in files.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(text)
    (run / "plan/n1/node-0.sh").chmod(0o700)
    return run


def test_files_to_upload_are_every_file_but_temporaries_and_the_lock(run_dir):
    names = [path.relative_to(run_dir).as_posix() for path in files_to_upload(run_dir)]
    assert names == [
        "manifest.json", "report.md", "summary.json", "throughput.png",
        "n1/r0/node-0.log", "n1/r0/result.json", "plan/n1/node-0.sh",
    ]  # fmt: skip


def test_upload_puts_every_file_under_prefix_and_run_id_byte_for_byte(s3, run_dir):
    seen: list[UploadProgress] = []
    upload = S3Store(parse_results_url(f"s3://{BUCKET}/team")).upload(run_dir, seen.append)

    objects = stored(s3, "team/")
    expected = {
        f"team/r1/{path.relative_to(run_dir).as_posix()}": path.read_bytes()
        for path in files_to_upload(run_dir)
    }
    assert objects == expected
    assert upload.url == f"s3://{BUCKET}/team/r1/"
    assert sorted(upload.keys) == sorted(expected)
    assert upload.bytes == sum(len(body) for body in expected.values())
    assert seen[-1] == UploadProgress(7, 7, upload.bytes, upload.bytes)
    assert [p.bytes_done for p in seen] == sorted(p.bytes_done for p in seen)


def test_uploaded_files_get_content_types_a_browser_shows(s3, run_dir):
    S3Store(parse_results_url(f"s3://{BUCKET}")).upload(run_dir)

    def content_type(name):
        return s3.head_object(Bucket=BUCKET, Key=f"r1/{name}")["ContentType"]

    assert content_type("summary.json") == "application/json"
    assert content_type("report.md") == "text/markdown; charset=utf-8"
    assert content_type("throughput.png") == "image/png"
    assert content_type("n1/r0/node-0.log") == "text/plain; charset=utf-8"
    assert content_type("plan/n1/node-0.sh") == "text/x-shellscript; charset=utf-8"


def test_secret_env_values_are_redacted_in_the_copies_only(s3, run_dir):
    script = run_dir / "plan/n1/node-0.sh"
    before = script.read_bytes()
    S3Store(parse_results_url(f"s3://{BUCKET}")).upload(run_dir, secrets=["hunter2-token"])

    copy = s3.get_object(Bucket=BUCKET, Key="r1/plan/n1/node-0.sh")["Body"].read()
    assert copy == b"#!/bin/bash\nexport HF_TOKEN=<redacted>\n"
    assert not any(b"hunter2-token" in body for body in stored(s3, "r1/").values())
    assert script.read_bytes() == before
    assert stat.S_IMODE(script.stat().st_mode) == 0o700


def test_a_log_over_the_in_memory_limit_is_redacted_piece_by_piece(
    s3, run_dir, monkeypatch, tmp_path
):
    from dtrun.store import base

    monkeypatch.setattr(base, "SCAN_LIMIT", 100)  # the streamed path, on a small file
    lines = [f"step {i}: loss 0.{i:03d}\n" for i in range(200)]
    lines[57] = "wandb login hunter2-token\n"  # in the middle of a piece
    lines[199] = "last line, no newline, hunter2-token"
    log = run_dir / "n1/r0/node-0.log"
    log.write_text("".join(lines))
    checkpoint = run_dir / "n1/r0/model.pt"  # over the limit, nothing to hide: goes as it is
    checkpoint.write_bytes(bytes(range(256)) * 4)
    own_tmp = tmp_path / "tmp"  # other workers' uploads spill into the shared /tmp
    own_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(own_tmp))

    S3Store(parse_results_url(f"s3://{BUCKET}")).upload(run_dir, secrets=["hunter2-token"])

    objects = stored(s3, "r1/")
    assert not any(b"hunter2-token" in body for body in objects.values())
    copy = objects["r1/n1/r0/node-0.log"].decode().splitlines(keepends=True)
    assert len(copy) == 200
    assert [line for i, line in enumerate(copy) if i not in (57, 199)] == [
        line for i, line in enumerate(lines) if i not in (57, 199)
    ]  # every other line byte for byte, none cut at a piece's end
    assert "hunter2-token" in log.read_text()  # the local log is untouched
    assert objects["r1/n1/r0/model.pt"] == checkpoint.read_bytes()
    assert list(own_tmp.iterdir()) == []  # the spill went with the upload


def test_a_secret_cut_by_a_line_break_where_a_piece_ends_is_masked_on_both_lines(
    s3, run_dir, monkeypatch, tmp_path
):
    """A log redacted piece by piece: a piece ends at a line's end, which may be where a
    program's wrapped output cut a secret; both parts are masked all the same."""
    from dtrun.store import base

    monkeypatch.setattr(base, "SCAN_LIMIT", 23)  # pieces end at every kind of line
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    log = run_dir / "n1/r0/node-0.log"
    log.write_text("".join(f"s{i}: hun\nter2x {i}\n" for i in range(40)))

    S3Store(parse_results_url(f"s3://{BUCKET}")).upload(run_dir, secrets=["hunter2x"])

    copy = stored(s3, "r1/")["r1/n1/r0/node-0.log"].decode()
    assert copy == "".join(f"s{i}: <redacted>\n<redacted> {i}\n" for i in range(40))


def test_short_values_are_not_taken_for_secrets(s3, run_dir):
    S3Store(parse_results_url(f"s3://{BUCKET}")).upload(run_dir, secrets=["true", "1"])
    assert stored(s3, "r1/")["r1/n1/r0/result.json"] == b'{"tokens_per_s": 10}\n'


@pytest.mark.parametrize("streamed", [False, True], ids=["in-memory", "streamed"])
def test_a_denied_upload_names_how_many_files_failed_and_keeps_the_local_copy(
    s3, run_dir, monkeypatch, streamed
):
    if streamed:  # every file over the in-memory limit: redacted piece by piece
        from dtrun.store import base

        monkeypatch.setattr(base, "SCAN_LIMIT", 16)
    for name, value in user_keys("lister", actions=LIST_ONLY).items():
        monkeypatch.setenv(name, value)
    local = {path: path.read_bytes() for path in files_to_upload(run_dir)}
    store = S3Store(parse_results_url(f"s3://{BUCKET}/dtrun"))
    with enable_iam_authentication():
        store.preflight()
        with pytest.raises(UploadError) as caught:
            store.upload(run_dir, secrets=["hunter2-token"])
    error = caught.value
    assert error.what == f"7 of 7 files did not upload to s3://{BUCKET}/dtrun/r1/"
    assert "AccessDenied" in error.why
    assert f"the local copy is kept in {run_dir}" in error.fix
    # the advice syncs a redacted copy, not the run directory, whose script holds HF_TOKEN
    assert f"aws s3 sync {run_dir} " not in error.fix
    (copy,) = run_dir.parent.glob("r1.redacted-*")
    assert f"aws s3 sync {copy} s3://{BUCKET}/dtrun/r1/" in error.fix
    copied = {
        path.relative_to(copy).as_posix(): path.read_bytes() for path in files_to_upload(copy)
    }
    assert copied["plan/n1/node-0.sh"] == b"#!/bin/bash\nexport HF_TOKEN=<redacted>\n"
    assert stat.S_IMODE((copy / "plan/n1/node-0.sh").stat().st_mode) == 0o700
    assert set(copied) == {path.relative_to(run_dir).as_posix() for path in local}
    assert error.exit_code == 3
    assert {path: path.read_bytes() for path in files_to_upload(run_dir)} == local
    assert (run_dir / "runs.json.partial").exists()


def test_a_redacted_copy_a_full_disk_cut_short_is_not_left_to_sync(
    s3, tmp_path, monkeypatch, small_disk
):
    """A denied upload of a run on a full disk: its redacted copy, made beside it, cannot
    take the redacted launch script. The advice is to sync the records alone, and no half
    copy is left beside the run (its script empty, other files missing) for a user to sync
    as if whole. Before, r1.redacted-XXXX stayed, taking what space the disk had left."""
    run = small_disk(256) / "r1"
    (run / "plan").mkdir(parents=True)
    (run / "manifest.json").write_text('{"schema": "dtrun.manifest/1"}\n')
    (run / "plan" / "node-0.sh").write_text("#!/bin/bash\nexport HF_TOKEN=hunter2-token\n")
    fill(run.parent)
    for name, value in user_keys("lister", actions=LIST_ONLY).items():
        monkeypatch.setenv(name, value)
    store = S3Store(parse_results_url(f"s3://{BUCKET}/dtrun"))
    with enable_iam_authentication(), pytest.raises(UploadError) as caught:
        store.upload(run, secrets=["hunter2-token"])
    assert "no redacted copy could be made (No space left on device)" in caught.value.fix
    assert f"aws s3 sync {run} s3://{BUCKET}/dtrun/r1/ --exclude '*'" in caught.value.fix
    assert not list(run.parent.glob("r1.redacted-*"))


def test_every_scheme_the_url_parser_accepts_has_a_store():
    assert tuple(STORES) == SCHEMES


def test_no_link_in_a_run_is_uploaded_nor_its_target_and_the_copy_lists_them(s3, run_dir):
    # --results followed the links a program left in its launch directory: a link to a key
    # uploaded the key
    outside = run_dir.parent.parent / "outside"
    (outside / "dataset").mkdir(parents=True)
    (outside / "dataset" / "part-0.bin").write_text("the whole dataset")
    (outside / "id_ed25519").write_text("PRIVATE KEY 4242")
    launch = run_dir / "n1" / "r0"
    (launch / "key").symlink_to(outside / "id_ed25519")
    (launch / "data").symlink_to(outside / "dataset")
    (launch / "gone").symlink_to(outside / "nothing-here")
    (launch / "again.json").symlink_to("result.json")  # inside the run: no second copy either
    before = {path: path.read_bytes() for path in files_to_upload(run_dir)}

    upload = S3Store(parse_results_url(f"s3://{BUCKET}")).upload(run_dir, secrets=["4242"])

    objects = stored(s3, "r1/")
    assert not any(b"PRIVATE KEY" in body or b"whole dataset" in body for body in objects.values())
    assert sorted(objects) == sorted(
        [f"r1/{path.relative_to(run_dir).as_posix()}" for path in before] + ["r1/symlinks.json"]
    )
    names = ["n1/r0/again.json", "n1/r0/data", "n1/r0/gone", "n1/r0/key"]
    assert list(upload.links) == names
    notes = json.loads(objects["r1/symlinks.json"])
    assert notes["schema"] == "dtrun.symlinks/1"
    assert [(n["path"], n["target"]) for n in notes["links"]] == [
        ("n1/r0/again.json", "result.json"),
        ("n1/r0/data", str(outside / "dataset")),
        ("n1/r0/gone", str(outside / "nothing-here")),
        ("n1/r0/key", str(outside / "id_ed25519")),
    ]
    assert {path: path.read_bytes() for path in files_to_upload(run_dir)} == before  # kept
    assert (launch / "key").is_symlink()


def test_a_run_without_links_uploads_no_list_of_them(s3, run_dir):
    upload = S3Store(parse_results_url(f"s3://{BUCKET}")).upload(run_dir)
    assert upload.links == ()
    assert "r1/symlinks.json" not in stored(s3, "r1/")

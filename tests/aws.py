"""An in-process AWS for the results store tests (moto), and IAM users with real policies."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import boto3

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

BUCKET = "results"
ACCOUNT = "123456789012"  # moto's account
# May see the bucket, so the preflight passes, but write nothing. AWS authorizes HeadBucket
# with s3:ListBucket; moto checks an action of its own naming, s3:HeadBucket.
LIST_ONLY = ["s3:ListBucket", "s3:HeadBucket"]


def user_keys(name: str, actions: list[str]) -> dict[str, str]:
    """Environment variables for a new IAM user allowed only ``actions`` on the bucket.

    moto evaluates the policy for real once IAM checks are on (moto's
    ``enable_iam_authentication``), as AWS would: anything else is AccessDenied.
    """
    iam = boto3.client("iam")
    iam.create_user(UserName=name)
    resources = [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"]
    statements = [{"Effect": "Allow", "Action": actions, "Resource": resources}] if actions else []
    # A user needs some policy to be evaluated; this one grants nothing of S3.
    statements.append({"Effect": "Allow", "Action": "ec2:DescribeRegions", "Resource": "*"})
    iam.put_user_policy(
        UserName=name,
        PolicyName="dtrun-results",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}),
    )
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return {
        "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
        "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
    }


def stored(client: S3Client, prefix: str) -> dict[str, bytes]:
    """Every object under ``prefix``: key -> bytes."""
    found = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        for item in page.get("Contents", []):
            key = item["Key"]
            found[key] = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    return found

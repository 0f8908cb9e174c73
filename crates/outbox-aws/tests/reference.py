"""AWS's own signers for the reference tests (tests/reference.rs): reads a
JSON list of cases on stdin, signs each with botocore's SigV4 presigner
(boto3's `generate_db_auth_token`, `aws_msk_iam_sasl_signer`) at the time
the case gives, and prints a JSON list of what they made.

A case is {"kind": "msk" or "rds", "time": seconds since the epoch (may
have a fraction), "region", "access_key_id", "secret_access_key",
"session_token" (or null), and for "rds": "host", "port", "user"}.

botocore reads the clock once per signature, through
`botocore.compat.get_current_datetime` as imported into `botocore.auth`
(naive UTC); that one name is replaced by the case's fixed time. The MSK
signer reads no clock of its own: its expiry comes from the signed URL's
X-Amz-Date.
"""

import datetime
import importlib.metadata
import json
import sys

import boto3
import botocore.auth
from botocore.credentials import CredentialProvider, Credentials

from aws_msk_iam_sasl_signer import MSKAuthTokenProvider


def freeze_clock(seconds):
    fixed = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)

    def get_current_datetime(remove_tzinfo=True):
        return fixed.replace(tzinfo=None) if remove_tzinfo else fixed

    botocore.auth.get_current_datetime = get_current_datetime


class FixedCredentials(CredentialProvider):
    METHOD = "fixed"

    def __init__(self, case):
        super().__init__()
        self.case = case

    def load(self):
        return Credentials(
            self.case["access_key_id"],
            self.case["secret_access_key"],
            self.case["session_token"],
        )


def msk(case):
    token, expiry_ms = (
        MSKAuthTokenProvider.generate_auth_token_from_credentials_provider(
            case["region"], FixedCredentials(case)
        )
    )
    return {"token": token, "expiry_ms": expiry_ms}


def rds(case):
    client = boto3.client(
        "rds",
        region_name=case["region"],
        aws_access_key_id=case["access_key_id"],
        aws_secret_access_key=case["secret_access_key"],
        aws_session_token=case["session_token"],
    )
    token = client.generate_db_auth_token(
        DBHostname=case["host"],
        Port=case["port"],
        DBUsername=case["user"],
        Region=case["region"],
    )
    return {"token": token}


def main():
    results = []
    for case in json.load(sys.stdin):
        freeze_clock(case["time"])
        results.append(msk(case) if case["kind"] == "msk" else rds(case))
    name = MSKAuthTokenProvider.LIB_NAME
    print(
        json.dumps(
            {
                "msk_user_agent": f"{name}/{importlib.metadata.version(name)}",
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()

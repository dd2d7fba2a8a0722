"""A digest of each --env value that the records show redacted, so that `dtrun compare` can say
that two runs' secrets differ without either value being written anywhere (docs/report.md,
"Comparing runs").

The digest is salted and slow (PBKDF2-SHA256, 100,000 rounds) and cut to 48 bits: two runs'
digests of the same value match, and a guess at a value costs as much as the key derivation,
so a manifest.json shared or uploaded does not make a weak password cheap to try. The digest is
the same for every run, so it tells equal values apart from different ones, and no more.
"""

from __future__ import annotations

import hashlib

from dtrun.redact import redact_var

_SALT = b"dtrun: the digest of a redacted --env value, v1"
_ROUNDS = 100_000
_HEX = 12  # 48 bits: two different values share a digest about once in 10^14 pairs


def value_digest(value: str) -> str:
    derived = hashlib.pbkdf2_hmac("sha256", value.encode(), _SALT, _ROUNDS)
    return f"pbkdf2-sha256:{derived.hex()[:_HEX]}"


def env_digests(env: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """Name -> digest, for every variable whose recorded value is not its own value (a secret
    name's, or one holding URL credentials or token-shaped words)."""
    return {name: value_digest(value) for name, value in env if redact_var(name, value) != value}

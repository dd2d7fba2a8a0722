"""Secret redaction: which names and values never reach a log, a record, a report, an upload or
the terminal, and how they are hidden. Every writer goes through here. Pure; imports nothing of
dtrun.

Three rules, applied together:
- a variable or option whose *name* looks secret has its whole value hidden (``DB_PASS``,
  ``GITHUB_PAT``, ``--hf-token``);
- credentials inside any URL are hidden, whatever carries them (``https://user:pw@host``);
- values shaped like well-known tokens are hidden wherever they appear (``ghp_…``, ``AKIA…``,
  ``xoxb-…``, ``sk-…``, ``hf_…``, JWTs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "<redacted>"

# Variable names whose values never reach a log, a report or the terminal: anywhere in the name.
_SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SAS|CONNECTION_STRING|PRIVATE|DSN",
    re.IGNORECASE,
)
# Short words that mark a secret only as a whole part of a name: DB_PASS, GITHUB_PAT, SMTP_PWD
# (but not PATH, PASSAGE, COMPASS).
_SECRET_PARTS = {"PASS", "PWD", "PAT", "PIN", "OTP", "SIG", "SIGNATURE", "SESSION", "CERT"}

# The words of an option's name (--hf-token, --db_password) that mark its value secret. Whole
# words, unlike variable names: --tokenizer and --keep-last say nothing secret.
_SECRET_WORD = re.compile(
    r"key|apikey|token|secret|passw(or)?d|pwd|pass|pat|credentials?|auth|cookie|sas|dsn|private",
    re.IGNORECASE,
)

# user:password@ in URLs (proxies, package indexes, databases), whatever carries them.
_URL_CREDENTIALS = re.compile(r"(://)([^/@\s]+)@")

# Tokens recognisable by their shape, wherever they appear in a value.
_TOKEN_SHAPES = re.compile(
    r"\bgh[pousr]_[A-Za-z0-9]{20,}"  # GitHub tokens
    r"|\bgithub_pat_[A-Za-z0-9_]{20,}"  # GitHub fine-grained tokens
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key ids
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"  # Slack tokens
    r"|\bsk-[A-Za-z0-9_-]{20,}"  # OpenAI-style API keys
    r"|\bhf_[A-Za-z0-9]{20,}"  # Hugging Face tokens
    r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWTs
)


def is_secret_name(name: str) -> bool:
    """A variable name whose whole value is hidden."""
    if _SECRET_NAME.search(name):
        return True
    return any(part.upper() in _SECRET_PARTS for part in re.split(r"[^A-Za-z0-9]+", name))


def redact_url_credentials(value: str) -> str:
    return _URL_CREDENTIALS.sub(rf"\g<1>{REDACTED}@", value)


def redact_value(value: str) -> str:
    """A value with the credentials inside its URLs and its token-shaped parts hidden."""
    return _TOKEN_SHAPES.sub(REDACTED, redact_url_credentials(value))


def secrets_in(value: str) -> list[str]:
    """The parts of a value that ``redact_value`` hides: URL credentials and tokens."""
    return [m.group(2) for m in _URL_CREDENTIALS.finditer(value)] + [
        m.group(0) for m in _TOKEN_SHAPES.finditer(value)
    ]


def redact_var(name: str, value: str) -> str:
    """One variable's value as records show it."""
    return REDACTED if is_secret_name(name) else redact_value(value)


def _is_secret_option(name: str) -> bool:
    return any(_SECRET_WORD.fullmatch(word) for word in re.split(r"[-_.]", name) if word)


def secret_args(args: tuple[str, ...]) -> tuple[str, ...]:
    """The values in a program's arguments that records must not show: those of options named
    like secrets (``--hf-token X``, ``--api-key=X``, ``DB_PASSWORD=X``), URL credentials and
    token-shaped values."""
    return _scan_args(args)[1]


def redact_args(args: tuple[str, ...]) -> tuple[str, ...]:
    """``args`` with every value ``secret_args`` names replaced by <redacted>."""
    return _scan_args(args)[0]


def _scan_args(args: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    redacted: list[str] = []
    found: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next and not arg.startswith("-"):
            redacted.append(REDACTED)
            found.append(arg)
            hide_next = False
            continue
        name, equals, value = arg.partition("=")
        secret_name = _is_secret_option(name.lstrip("-"))
        hide_next = not equals and arg.startswith("-") and secret_name
        if equals and value and secret_name:
            redacted.append(f"{name}={REDACTED}")
            found.append(value)
            continue
        found.extend(secrets_in(arg))
        redacted.append(redact_value(arg))
    return tuple(redacted), tuple(dict.fromkeys(found))


def secret_values(env: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """Every value ``redact_env`` hides, whole or in part, for scrubbing copies of files that
    hold them verbatim (launch scripts, logs) before they are uploaded."""
    found: list[str] = []
    for name, value in env:
        if is_secret_name(name):
            if value:
                found.append(value)
        else:
            found.extend(secrets_in(value))
    return tuple(dict.fromkeys(found))


def redact_env(env: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple((name, redact_var(name, value)) for name, value in env)


# The secret values this process was given (--env values and program arguments that look
# secret): free text that may quote them (an error message, a failed node's last log lines) is
# scrubbed of them before it is printed or recorded. One command per process, so one set.
_known: set[str] = set()
_SHORTEST = 4  # shorter values would blank out ordinary words


def remember_secrets(values: Iterable[str]) -> None:
    """Add to the values ``redact_text`` hides wherever they appear."""
    _known.update(value for value in values if len(value) >= _SHORTEST)


def redact_text(text: str) -> str:
    """Free text as the terminal and the records show it: every remembered secret value, the
    credentials inside URLs and token-shaped words hidden."""
    for secret in sorted(_known, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return redact_value(text)

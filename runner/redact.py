"""Secret redaction: which names and values never reach a log, a record, a report or the
terminal, and how they are hidden. Pure; imports nothing of dtrun."""

from __future__ import annotations

import re

# Variable names whose values never reach a log, a report or the terminal.
_SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SAS|CONNECTION_STRING|PRIVATE|DSN",
    re.IGNORECASE,
)


REDACTED = "<redacted>"


# The words of an option's name (--hf-token, --db_password) that mark its value secret. Whole
# words, unlike variable names: --tokenizer and --keep-last say nothing secret.
_SECRET_WORD = re.compile(
    r"key|apikey|token|secret|passw(or)?d|pwd|pass|credentials?|auth|cookie|sas|dsn|private",
    re.IGNORECASE,
)


# user:password@ in URLs (proxies, package indexes, databases), whatever carries them.
_URL_CREDENTIALS = re.compile(r"(://)([^/@\s]+)@")


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def redact_url_credentials(value: str) -> str:
    return _URL_CREDENTIALS.sub(rf"\g<1>{REDACTED}@", value)


def _is_secret_option(name: str) -> bool:
    return any(_SECRET_WORD.fullmatch(word) for word in re.split(r"[-_.]", name) if word)


def secret_args(args: tuple[str, ...]) -> tuple[str, ...]:
    """The values in a program's arguments that records must not show: those of options named
    like secrets (``--hf-token X``, ``--api-key=X``, ``DB_PASSWORD=X``) and URL credentials."""
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
        found.extend(match.group(2) for match in _URL_CREDENTIALS.finditer(arg))
        redacted.append(redact_url_credentials(arg))
    return tuple(redacted), tuple(dict.fromkeys(found))


def secret_values(env: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    return tuple(value for name, value in env if is_secret_name(name) and value)


def redact_env(env: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple((name, REDACTED if is_secret_name(name) else value) for name, value in env)

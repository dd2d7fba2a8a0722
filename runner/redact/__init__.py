"""Secret redaction: which names and values never reach a log, a record, a report, an upload or
the terminal, and how they are hidden. Every writer goes through here. Pure but for the one
set of values this process was given (``remember_secrets``); imports nothing of dtrun.

What is secret, by four rules applied together (runner/redact/shapes.py):
- a variable or option whose *name* looks secret, in any case style, has its whole value
  hidden (``DB_PASS``, ``GPG_PW``, ``--hf-token``, ``--accessToken``, ``--password -dash``);
- credentials inside any URL are hidden, whatever carries them (``https://user:pw@host``, the
  password holding ``/`` or ``@`` included);
- credentials in a header written as text (``Authorization: Bearer X``, ``X-Api-Key: X``);
- values shaped like well-known tokens are hidden wherever they appear (``ghp_…``, ``AKIA…``,
  ``xoxb-…``, Slack webhooks, ``sk-…``, ``hf_…``, JWTs, PEM private keys).

How a secret value is found again in free text (a program's output, an error, a rendered
script): not only whole, but by its *fragments* (``fragments``): each line of a multi-line value
(a PEM key printed line by line) and each piece in every quoting dtrun or a program writes it
in (shell single and double quotes, JSON, Python repr, URL and HTML escapes, and each of those
inside another), and in base64 (``base64_forms``: an HTTP Basic header, a config blob); and
where line breaks cut it (runner/redact/cuts.py). A ``Redactor`` knows the fragments of every
secret value and masks them.
"""

from __future__ import annotations

import html
import json
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import quote, quote_plus

from dtrun.redact.cuts import SHORTEST, cut_forms, mask_cuts, mask_wrapped, started
from dtrun.redact.decoded import mask, readings
from dtrun.redact.encoded import base64_forms, hex_forms
from dtrun.redact.shapes import (
    REDACTED,
    is_secret_name,
    is_secret_option,
    line_secrets,
    name_words,
    pem_line,
    pem_lines,
    redact_url_credentials,
    redact_value,
    scan_args,
    secrets_in,
    secrets_in_line,
)

__all__ = [
    "REDACTED", "Redactor", "fragments", "is_secret_name", "is_secret_option", "name_words",
    "pem_line", "pem_lines", "process_redactor", "redact_args", "redact_cuts", "redact_data",
    "redact_env", "redact_text", "redact_url_credentials", "redact_value", "redact_var",
    "remember_secrets", "secret_args", "secret_values", "secrets_in", "secrets_in_environment",
    "spare_secrets", "worth_looking_for",
]  # fmt: skip

# A value, or a line of one, is looked for in free text only from SHORTEST characters: shorter
# ones ("1", "true", "yes") would blank ordinary words and numbers in every log and record.
# Those values are still hidden wherever dtrun knows their name (records, the dry-run's scripts).
# Words of configuration, not secrets, even under a secret-looking name
# (TOKENIZERS_PARALLELISM=false, AUTH_MODE=disabled): never looked for in free text.
_ORDINARY = frozenset(
    {"true", "false", "enabled", "disabled", "default", "none", "null", "unknown", "always"}
)

# Line breaks a value's lines are split on: real ones, and the escaped \n of JSON or a shell
# $'...' string (a PEM inside SERVICE_ACCOUNT_JSON).
_LINE_BREAKS = re.compile(r"(?:\r?\n|\\r\\n|\\n|\\r|\r)+")


def _inner(quoted: Callable[[str], str]) -> Callable[[str], str]:
    return lambda text: quoted(text)[1:-1]


# How a piece of a value is written by the renderer (shlex.quote: 'a'"'"'b'; yaml_str and
# .deepspeed_env: JSON and raw), by programs (repr, json.dumps, print) and by the records and
# reports (JSON, HTML, Markdown table cells), each without its outer quotes: the piece may sit
# inside a larger quoted string (ECHO_CMD='wandb login a'"'"'b').
_ENCODINGS: tuple[Callable[[str], str], ...] = (
    lambda text: text.replace("'", "'\"'\"'"),  # inside '...' as shlex.quote writes it
    lambda text: re.sub(r'([$`"\\])', r"\\\1", text),  # inside "..." of a shell
    _inner(json.dumps),
    _inner(lambda text: json.dumps(text, ensure_ascii=False)),
    _inner(repr),
    lambda text: quote(text, safe=""),
    quote,  # a URL path: / kept
    quote_plus,  # a form or a query string
    html.escape,
    lambda text: html.escape(text, quote=False),
    lambda text: text.replace("|", "\\|"),  # a Markdown table cell
)


def worth_looking_for(piece: str) -> bool:
    """Whether a value or a line of one is masked wherever it appears in free text."""
    return len(piece) >= SHORTEST and not piece.isdigit() and piece.strip().lower() not in _ORDINARY


def lines_of(value: str) -> list[str]:
    """The value and, for a multi-line one, each of its lines, as the forms' sources."""
    lines = [line.strip() for line in _LINE_BREAKS.split(value)]
    return [piece for piece in dict.fromkeys([value, *lines]) if worth_looking_for(piece)]


def fragments(value: str) -> frozenset[str]:
    """Every string a secret ``value`` may be seen as: the value and each of its lines, each as
    written raw and in every encoding of ``_ENCODINGS``, and of two of them one inside the
    other (JSON inside shell quotes, a URL-encoded piece inside JSON); and the value and each
    line in base64 and in hexadecimal."""
    found: set[str] = set()
    for piece in lines_of(value):
        once = {piece, *(encode(piece) for encode in _ENCODINGS)}
        found.update(once)
        found.update(encode(form) for form in once for encode in _ENCODINGS)
        found.update(base64_forms(piece))
        found.update(hex_forms(piece))
    return frozenset(form for form in found if len(form) >= SHORTEST)


Data = TypeVar("Data")


@dataclass(frozen=True)
class Redactor:
    """Masks every fragment of the secret values it knows, then URL credentials and token
    shapes, in any text, bytes or JSON-like data."""

    forms: tuple[str, ...] = ()  # longest first, so a form inside another goes with it
    wrapped: tuple[str, ...] = ()  # the values and their lines looked for cut by line breaks
    read: tuple[str, ...] = ()  # the values and their lines, also as ``decoded`` reads them
    values: tuple[str, ...] = ()  # the values it was given (``sparing``)

    @classmethod
    def of(cls, values: Iterable[str]) -> Redactor:
        return cls().knowing(values)

    def knowing(self, values: Iterable[str]) -> Redactor:
        forms, wrapped, read = set(self.forms), dict.fromkeys(self.wrapped), set(self.read)
        values = tuple(values)
        for value in values:
            forms |= fragments(value)
            lines = lines_of(value)
            read.update(filter(worth_looking_for, (r for p in lines for r in readings(p))))
            wrapped.update(dict.fromkeys(f for p in lines for f in cut_forms(p)))
        longest_first = tuple(sorted(forms, key=lambda form: (-len(form), form)))
        given = tuple(dict.fromkeys((*self.values, *values)))
        return Redactor(longest_first, tuple(wrapped), tuple(sorted(read)), given)

    def sparing(self, spared: Callable[[str], bool]) -> Redactor:
        """This Redactor without the values ``spared`` says are not looked for."""
        return Redactor.of(value for value in self.values if not spared(value))

    def text(self, text: str) -> str:
        for form in self.forms:
            if form in text:
                text = text.replace(form, REDACTED)
        text = mask(text, self.read, REDACTED)  # a piece with escapes or colours between
        if self.wrapped:
            text = mask_wrapped(mask_cuts(text, self.wrapped), self.wrapped)
        return redact_value(text)

    def started(self, line: str) -> int:
        """How many characters at ``line``'s end may start a value the next line ends (``seam``)."""
        return started(line, self.wrapped)

    def seam(self, line: str, after: str) -> tuple[str, str]:
        """Two lines that follow each other, each with its part of a value the break between
        them cuts masked: what each shows before its own redaction (``text``)."""
        shown = mask_cuts(f"{line}\n{after}", self.wrapped)
        before, _, rest = shown.rpartition("\n") if "\n" not in after else (line, "", after)
        return before, rest

    def data(self, data: Data) -> Data:
        """``data`` (JSON-like: dicts, lists, strings) with every string redacted, each distinct
        string once: a record's keys, a node's address beside its name, repeat for every node
        (issue 41: 0.2 ms a node of each run.json write)."""
        seen: dict[str, str] = {}

        def walk(item: object) -> object:
            if isinstance(item, str):
                shown = seen.get(item)
                if shown is None:
                    shown = seen[item] = self.text(item)
                return shown
            if isinstance(item, dict):
                return {walk(key): walk(value) for key, value in item.items()}
            if isinstance(item, list | tuple):
                return type(item)(walk(part) for part in item)
            return item

        return walk(data)  # type: ignore[return-value]  # the same type as it came

    def body(self, data: bytes) -> bytes:
        """A file's bytes redacted: as text when they are UTF-8 or hold no NUL byte (a log with
        a stray byte that is not UTF-8, its bytes kept as they are), else the known values' raw
        bytes only (a binary file is left whole otherwise)."""
        try:
            text = data.decode()
        except UnicodeDecodeError:
            if b"\0" not in data:  # git's rule for a binary file
                shown = self.text(data.decode(errors="surrogateescape"))
                return shown.encode(errors="surrogateescape")
            for form in self.forms:
                encoded = form.encode()
                if encoded in data:
                    data = data.replace(encoded, REDACTED.encode())
            return data
        return self.text(text).encode()


def redact_var(name: str, value: str) -> str:
    """One variable's value as records show it."""
    if is_secret_name(name):
        return REDACTED
    return Redactor.of(secrets_in_line(value)).text(redact_text(value))


def secret_args(args: tuple[str, ...]) -> tuple[str, ...]:
    """The values in a program's arguments that records must not show: those of options named
    like secrets in any case style (``--hf-token X``, ``--api-key=X``, ``--accessToken X``,
    ``DB_PW=X``, ``--password -dash``), URL and header credentials and token-shaped values;
    also where an argument is a shell line (``bash -c 'curl --token X'``)."""
    return line_secrets(args)


def redact_args(args: tuple[str, ...], hide: Redactor | None = None) -> tuple[str, ...]:
    """``args`` with every value ``secret_args`` names replaced by <redacted>, its fragments
    in a shell line masked, and the fragments of the values ``hide`` knows masked in the rest."""
    hide = hide or Redactor()
    inner = line_secrets(args)
    if inner:
        hide = hide.knowing(inner)
    return tuple(hide.text(arg) for arg in scan_args(args)[0])


def secret_values(env: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """Every value ``redact_env`` hides, whole or in part: the values a Redactor is made of.
    A value too short to look for alone (``worth_looking_for``) is looked for after its name,
    as a launch script (``export NAME=VALUE``, shell-quoted) and .deepspeed_env write it."""
    found: list[str] = []
    for name, value in env:
        if is_secret_name(name):
            if value:
                found.append(value)
            if value and not worth_looking_for(value):
                found += [f"{name}={value}", f"{name}={shlex.quote(value)}"]
        else:
            found.extend(secrets_in_line(value))
    return tuple(dict.fromkeys(found))


def secrets_in_environment(
    env: Mapping[str, str], is_path: Callable[[str], bool] = lambda _: False
) -> tuple[str, ...]:
    """This machine's secrets: every secret-named variable's value (GPG_PASSPHRASE), and the
    URL credentials, tokens and secret options' values in every value. Remembered like the
    secrets given to dtrun: a program that prints one, or a node given one, shows <redacted>.
    Not a value that ``is_path`` says names a file (GOOGLE_APPLICATION_CREDENTIALS: the file
    is the secret, its path is not, and would blank ordinary paths)."""
    found = [
        value
        for name, value in env.items()
        if is_secret_name(name) and worth_looking_for(value) and not is_path(value)
    ]
    found += [x for value in env.values() for x in secrets_in_line(value) if not is_path(x)]
    return tuple(dict.fromkeys(found))


def redact_env(
    env: tuple[tuple[str, str], ...], hide: Redactor | None = None
) -> tuple[tuple[str, str], ...]:
    """Secret-named values replaced whole; in the others, URL credentials, token shapes and the
    fragments of the values ``hide`` knows (WANDB_API_KEY's value inside ECHO_CMD)."""
    hide = hide or Redactor.of(secret_values(env))
    return tuple(
        (name, REDACTED if is_secret_name(name) else hide.text(value)) for name, value in env
    )


# The secret values this process was given (--env values, program arguments, credentials in
# --results or a hosts file): every free text, record and upload is scrubbed of their fragments
# before it is printed, written or sent. One command per process, so one set.
_process = Redactor()


def remember_secrets(values: Iterable[str]) -> None:
    """Add to the values ``redact_text`` hides wherever they appear."""
    global _process
    _process = _process.knowing(values)


def process_redactor() -> Redactor:
    """The Redactor of every value this process was given as secret."""
    return _process


def spare_secrets(spared: Callable[[str], bool]) -> None:
    """Stop looking for the remembered values ``spared`` says are not (this machine's
    variables' values that are names dtrun writes: runner/cli/ownwords.py)."""
    global _process
    _process = _process.sparing(spared)


def redact_text(text: str) -> str:
    """Free text as the terminal and the records show it: every fragment of every remembered
    secret value, the credentials inside URLs and token-shaped words hidden."""
    return _process.text(text)


def redact_cuts(text: str) -> str:
    """``text`` with the remembered values masked only where line breaks cut them: a log whose
    lines are then quoted apart or cut short (runner/execute/failure.py)."""
    return mask_cuts(text, _process.wrapped)


def redact_data(data: Data) -> Data:
    """JSON-like data (a record, --json output) with every string redacted as ``redact_text``."""
    return _process.data(data)

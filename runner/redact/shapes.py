"""What is secret by its name or its shape: variable names, option names in any case style,
URL credentials, credential headers and well-known token shapes (docs/security.md
"Redaction"). Pure; runner/redact/__init__.py masks what these rules find.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import shlex
from urllib.parse import unquote

from dtrun.redact.tools import optional_values, tool_passwords

REDACTED = "<redacted>"

# Variable names whose values never reach a log, a report or the terminal: anywhere in the name
# (SSHPASS: sshpass(1) -e reads the password from it).
_SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|SAS|CONNECTION_STRING|PRIVATE|DSN|"
    r"SSHPASS",
    re.IGNORECASE,
)
# Short words that mark a secret only as a whole word of a name: DB_PASS, GITHUB_PAT, SMTP_PWD,
# GPG_PW (but not PATH, PASSAGE, COMPASS).
_SECRET_PARTS = {
    "PASS", "PWD", "PW", "PAT", "PIN", "OTP", "SIG", "SIGNATURE", "SESSION", "CERT", "CRED",
    "CREDS",
}  # fmt: skip
# The login session's own bookkeeping, not secrets though their names say so: the working
# directory (PWD), sockets and files of agents (SSH_AUTH_SOCK, XAUTHORITY), session ids.
_SESSION_NAMES = frozenset(
    {"PWD", "OLDPWD", "SSH_AUTH_SOCK", "SSH_AGENT_PID", "XAUTHORITY", "KRB5CCNAME",
     "DBUS_SESSION_BUS_ADDRESS", "SESSION_MANAGER", "DESKTOP_SESSION", "GPG_AGENT_INFO",
     "GNOME_KEYRING_CONTROL", "GNOME_KEYRING_PID"}
)  # fmt: skip

# The words of an option's name (--hf-token, --accessToken, --DB_PASSWORD) that mark its value
# secret, as whole words: --tokenizer and --keep-last say nothing secret.
_SECRET_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "passphrase", "pwd", "pw", "pass",
     "pat", "credential", "credentials", "cred", "creds", "auth", "authorization", "cookie",
     "sas", "dsn", "private"}
)  # fmt: skip
# Words that mark a secret inside a longer word (--dbpassword, --hubtoken, --clientsecret).
_SECRET_STEMS = ("passw", "passphrase", "secret", "credential")
_SECRET_ENDINGS = ("token", "apikey", "accesskey", "privatekey", "secretkey", "pwd")
# Words that make a secret word a quantity, an identifier or a kind, never a secret:
# --max-tokens 5, --token-budget 4096, --pad-token-id 0, --key-dim 64, --token-type bearer.
_NOT_SECRET_WORDS = frozenset(
    {"num", "max", "min", "budget", "count", "limit", "len", "length", "size", "per", "total",
     "dim", "dims", "rate", "ratio", "id", "ids", "index", "type", "name", "names"}
)  # fmt: skip

# A name's case-style boundaries: a lower-case letter or digit before an upper-case one
# (accessToken), and an upper-case run before a capitalised word (HFToken, APIKey).
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def name_words(name: str) -> list[str]:
    """The words of a name in any case style, lower-case: ``--hf-token``, ``--hf_token``,
    ``--hfToken``, ``--HF_TOKEN`` and ``HFToken`` are all ``["hf", "token"]``."""
    return [word.lower() for word in re.split(r"[^A-Za-z]+", _CAMEL.sub(" ", name)) if word]


def is_secret_name(name: str) -> bool:
    """A variable name whose whole value is hidden."""
    if name in _SESSION_NAMES or name.startswith("XDG_"):
        return False
    if _SECRET_NAME.search(name):
        return True
    return any(word.upper() in _SECRET_PARTS for word in name_words(name))


def is_secret_option(name: str) -> bool:
    """An option or argument name (``--hf-token``, ``--accessToken``, ``DB_PW``) whose value
    is hidden: a secret word among its words in any case style, and no word that makes it a
    count or an identifier (``--max-tokens``, ``--token-budget``, ``--pad-token-id``)."""
    words = name_words(name)
    if any(word in _NOT_SECRET_WORDS for word in words):
        return False
    return any(
        word in _SECRET_WORDS
        or any(stem in word for stem in _SECRET_STEMS)
        or word.endswith(_SECRET_ENDINGS)
        for word in words
    )


# The user-info of a URL, whatever carries it: `scheme://USER:PASSWORD@host` or
# `scheme://USER@host`. A password is taken up to the *last* @ before the host, so one holding
# / or @ (`https://bob:Slash/Pw@h`, `https://bob:At@Pw@h`) is hidden whole; urllib.parse would
# end the user-info at the first / and the old rule at the first @, each leaving a part shown.
# The password stops at white space, double quotes and <> (JSON and HTML around the URL);
# lengths are bounded, the scheme's too (`postgresql+psycopg2` is 19), so a long line of many
# URLs or of hyphenated words is not searched over and over.
_URL_CREDENTIALS = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]{0,63}://)"
    r"(?P<userinfo>[^\s/@:\"'<>]{0,256}:[^\s\"<>]{0,512}|[^\s/@:\"'<>]{1,256})"
    r"@(?=[^\s/@\"'<>])"
)

# An escape a credential's character may be written as inside JSON or a repr (a node's JSON
# log): a character past ASCII (`\u00e9`, a byte's `\xc3`, `\U0001f600`) or JSON's `\/`.
# Not one of a quote, <, >, a backslash or a control character: those end a credential.
_ESCAPED = (
    r"\\u(?!00(?:[01][0-9a-fA-F]|2[27]|3[ceCE]|5[cC]))[0-9a-fA-F]{4}"
    r"|\\x[89a-fA-F][0-9a-fA-F]|\\U000[0-9a-fA-F]{5}|\\U0010[0-9a-fA-F]{4}|\\/"
)

# A credential in an HTTP header written as text (`-H "Authorization: Bearer X"`, a log's
# `X-Api-Key: X`): the header's name, its scheme kept (RFC 9110 section 11.4: Bearer, Basic,
# Token, ...), and the credential, up to a quote, a backslash that is no _ESCAPED, <, > or the
# line's end. Every part is bounded, so a long hyphenated line is searched in linear time.
_HEADER = re.compile(
    # no \b before the two commonest: curl's `-HAuthorization: ...` in one argument
    r"(?P<head>(?i:(?:proxy-)?authorization|(?:set-)?cookie|\bprivate-token"
    r"|\b[a-z0-9]{1,32}(?:-[a-z0-9]{1,32}){0,4}-(?:api-?key|key|token|secret|auth|password|passwd|pwd|pw"
    r"|passphrase|credentials?|signature))"
    r"[ \t]*:[ \t]*"
    # possessive: a scheme seen is kept, so text already redacted stays as it is
    r"(?:(?i:bearer|basic|token|digest|negotiate|ntlm|apikey|aws4-hmac-sha256)[ \t]+)?+)"
    rf"(?P<credential>(?:[^\s\"'<>\\]|{_ESCAPED})"
    rf"(?:(?:[^\r\n\"'<>\\]|{_ESCAPED}){{0,1024}}(?:[^\s\"'<>\\]|{_ESCAPED}))?)"
)

# An OAuth bearer token without its header's name (RFC 6750 section 2.1: b64token).
_BEARER = re.compile(
    rf"(?P<head>\bBearer[ \t]+)(?P<credential>(?:[A-Za-z0-9._~+/-]|{_ESCAPED}){{8,}}=*)"
)

# Tokens recognisable by their shape, wherever they appear in a value.
_TOKEN_SHAPES = re.compile(
    r"\bgh[pousr]_[A-Za-z0-9]{20,}"  # GitHub tokens
    r"|\bgithub_pat_[A-Za-z0-9_]{20,}"  # GitHub fine-grained tokens
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key ids
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"  # Slack tokens
    r"|\bhooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{10,}"  # Slack webhooks
    r"|\bsk-[A-Za-z0-9_-]{20,}"  # OpenAI-style API keys
    r"|\bhf_[A-Za-z0-9]{20,}"  # Hugging Face tokens
    r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWTs
    # PEM private keys, also inside JSON (a service account's "private_key": "-----BEGIN...")
    r"|-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)-----END [A-Z0-9 ]*PRIVATE KEY-----"
)

# A PEM private key a program prints line by line (`print(key)`): each line reaches the console
# alone, where the whole key's shape is never seen. From a line that begins one, each line of
# its base64, its headers (Proc-Type: ...) and its END line is hidden, under the prefix its
# BEGIN line had (torchrun's "[rank0]:"); any other line ends it.
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_PEM_LINE = re.compile(
    r"[A-Za-z0-9+/=]{0,128}|[A-Za-z-]{1,32}: .{0,256}|-----END [A-Z0-9 ]*PRIVATE KEY-----.*"
)


def pem_line(line: str, prefix: str | None) -> tuple[str, str | None]:
    """One line of a stream with what it holds of a PEM private key printed line by line
    hidden, and the prefix the key's next line has (None: no key goes on). ``prefix``: what
    the line before said of this one."""
    if prefix is not None and line.startswith(prefix):
        rest = line[len(prefix) :].strip()
        if _PEM_LINE.fullmatch(rest):
            return prefix + REDACTED, None if rest.startswith("-----END") else prefix
    begin = _PEM_BEGIN.search(line)
    if begin is None or "-----END" in line[begin.end() :]:
        return line, None
    return line[: begin.start()] + REDACTED, line[: begin.start()]


def pem_lines(text: str) -> str:
    """``text`` with every PEM private key printed line by line hidden (``pem_line``): a log
    whose last lines alone are quoted would show the key's without its BEGIN line."""
    shown, prefix = [], None
    for line in text.split("\n"):
        line, prefix = pem_line(line, prefix)
        shown.append(line)
    return "\n".join(shown)


# Images inlined in HTML (report.html): base64 is left as it is, where a token's shape would
# turn up by chance and the image would break.
_DATA_URI = re.compile(r"(data:[\w/+.-]+;base64,[A-Za-z0-9+/=]+)")


def redact_url_credentials(value: str) -> str:
    return _URL_CREDENTIALS.sub(rf"\g<scheme>{REDACTED}@", value)


# What each pattern above cannot match without (the text each of its branches holds as it is,
# or lower-cased in ASCII text for _HEADER's names): a line of ordinary output, without any,
# is searched by none. 1 MB/s of 200-character lines took 1.1 s of CPU a second to redact
# (benchmarks/echo_cost.py). A line with a character past ASCII is searched by every pattern:
# under re.IGNORECASE U+017F (long s) is an "s", U+212A (Kelvin) a "k".
_HEADER_WORDS = (
    "auth", "cookie", "-api", "-key", "-token", "-secret", "-pw", "-pass", "-credential",
    "-signature",
)  # fmt: skip
_TOKEN_STARTS = (
    "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "AKIA", "ASIA", "xox",
    "hooks.slack.com/", "sk-", "hf_", "eyJ", "-----BEGIN ",
)  # fmt: skip


def _may_hold_header(part: str) -> bool:
    if ":" not in part:
        return False
    if not part.isascii():
        return True
    lowered = part.lower()
    return any(word in lowered for word in _HEADER_WORDS)


def _redact_shapes(part: str) -> str:
    if "://" in part and "@" in part:
        part = redact_url_credentials(part)
    if _may_hold_header(part):
        part = _HEADER.sub(rf"\g<head>{REDACTED}", part)
    if "Bearer" in part:
        part = _BEARER.sub(rf"\g<head>{REDACTED}", part)
    if any(start in part for start in _TOKEN_STARTS):
        part = _TOKEN_SHAPES.sub(REDACTED, part)
    return part


def redact_value(value: str) -> str:
    """A value with the credentials inside its URLs and headers and its token-shaped parts
    hidden."""
    parts = _DATA_URI.split(value) if "data:" in value else [value]  # odd: images, left whole
    return "".join(part if index % 2 else _redact_shapes(part) for index, part in enumerate(parts))


def secrets_in(value: str) -> list[str]:
    """The parts of a value that ``redact_value`` hides: URL credentials (and each URL's
    password alone, also URL-decoded), header credentials and tokens."""
    found: list[str] = []
    for match in _URL_CREDENTIALS.finditer(value):
        userinfo = match.group("userinfo")
        found.append(userinfo)
        _, colon, password = userinfo.partition(":")
        if colon and password:
            found += [password, unquote(password)]
    found += [match.group("credential") for match in _HEADER.finditer(value)]
    found += [match.group("credential") for match in _BEARER.finditer(value)]
    found += [match.group(0) for match in _TOKEN_SHAPES.finditer(value)]
    return list(dict.fromkeys(found))


def unquoted(value: str) -> list[str]:
    """A value, and without its quotes where it is quoted whole (``'X'``, ``"X"``): a shell or
    a program may print it either way."""
    if len(value) > 2 and value[0] == value[-1] and value[0] in "'\"":
        return [value, value[1:-1]]
    return [value]


def shell_words(args: tuple[str, ...]) -> tuple[str, ...]:
    """Each argument's words as a shell splits them (``bash -c LINE``, ``"--token X"`` as one
    argument, `dtrun exec`'s shell line), ``;``, ``&&``, ``|`` and redirections apart, or at
    white space and those where a quote is left open."""
    words: list[str] = []
    for arg in args:
        lexer = shlex.shlex(arg, posix=True, punctuation_chars=_PUNCTUATION)
        lexer.whitespace_split, lexer.commenters = True, ""  # as shlex.split: no comments
        lexer.whitespace = " \t\r"  # a new line ends a command, as `;` does
        try:
            words += ["\n" if "\n" in word and set(word) <= _ENDS else word for word in lexer]
        except ValueError:
            words += _SHELL_BREAKS.split(arg)
    return tuple(words)


# shlex's punctuation, a new line and a backtick: `wandb login<newline>python x` is two
# commands, so `python` was taken for wandb's key; a command between backticks is one too
_PUNCTUATION = "();<>|&\n`"
_ENDS = frozenset(_PUNCTUATION)
_SHELL_BREAKS = re.compile(r"[\s;&|<>()]+")


# An argument's name before `=` or as an option: `--api-key`, `DB_PW`, Hydra's `+db.password`;
# text with a space or a colon before its `=` (`Authorization: Basic dXNlcg==`) is no name.
_ARG_NAME = re.compile(r"[-+~]{0,2}[A-Za-z_][A-Za-z0-9_.-]*")


def scan_args(
    args: tuple[str, ...], words: bool = False
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``args`` with every secret value replaced by <redacted>, and those values.

    The value of a secret option is hidden whether it comes after `=` (``--api-key=X``,
    ``DB_PW=X``) or as the next argument (``--password X``), also when it starts with a single
    `-` (``--password -dashSecret99``); an argument starting with `--` after one is the next
    option (a secret-named flag: ``--use-auth --lr 3e-4``), but for mysql's (``--password
    DB``). So is the password a well-known tool takes after a short flag (``curl -u bob:PW``,
    ``sshpass -p PW``: ``tool_passwords``), named where a command starts in a line's
    ``words``, anywhere in a program's arguments."""
    redacted: list[str] = []
    found: list[str] = []
    hide_next = False
    passwords = tool_passwords(args, REDACTED, anywhere=not words)
    tools = {index: (shown, password) for index, shown, password in passwords}
    optional = optional_values(args)  # mysql's `--password DB`: DB is no password
    for index, arg in enumerate(args):
        if index in tools:
            redacted.append(tools[index][0])
            found.extend(unquoted(tools[index][1]))
            hide_next = False
            continue
        if hide_next and not arg.startswith("--"):
            redacted.append(REDACTED)
            found.extend(unquoted(arg))
            hide_next = False
            continue
        name, equals, value = arg.partition("=")
        secret_name = bool(_ARG_NAME.fullmatch(name)) and is_secret_option(name)
        hide_next = not equals and arg.startswith("-") and secret_name and index not in optional
        if equals and value and secret_name:
            redacted.append(f"{name}={REDACTED}")
            found.extend(unquoted(value))
            continue
        found.extend(secrets_in(arg))
        redacted.append(redact_value(arg))
    return tuple(redacted), tuple(dict.fromkeys(found))


# A quoted key and its quoted value, as JSON, a Python dict or YAML's flow style write them
# (`{"api_key": "X"}`, `{'hf_token': 'X'}`): bounded, so a long line is searched in linear time.
_QUOTED_PAIR = re.compile(
    r"""(?P<q>["'])(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,63})(?P=q)[ \t]{0,8}:[ \t]{0,8}"""
    r"""(?P<v>["'])(?P<value>(?:\\.|(?!(?P=v))[^\\\n]){1,1024}?)(?P=v)"""
)


def _quoted_pairs(arg: str) -> list[str]:
    """The values of ``arg``'s quoted secret-named keys, as written and as JSON reads them."""
    found: list[str] = []
    for match in _QUOTED_PAIR.finditer(arg):
        if is_secret_option(match.group("name")):
            found.append(match.group("value"))
            with contextlib.suppress(ValueError):  # a Python dict's escapes, not JSON's
                found.append(str(json.loads(f'"{match.group("value")}"')))
    return found


def line_secrets(args: tuple[str, ...]) -> tuple[str, ...]:
    """The secret values ``scan_args`` finds in ``args``, in their words as a shell splits them
    (``bash -c 'curl --token X'``), and in the words quoted inside those read as lines again
    (``'"--hf-token X"'``, ``bash -c 'run "--token X"'``); and those of secret-named keys of
    JSON or a dict in any of them (``--config '{"hf_token": "X"}'``)."""
    words = shell_words(args)
    found = [*scan_args(args)[1], *scan_args(words, True)[1]]
    found += scan_args(shell_words(words), True)[1]
    # an option's value that is a line a short-flag tool starts (`--setup 'sshpass -p PW h'`,
    # `--setup='sshpass -p PW h'`)
    pairs = itertools.pairwise((*args, "", *words))
    values = [b for a, b in pairs if a[:1] == "-"]
    values += [a.partition("=")[2] for a in args if a[:1] == "-" and "=" in a]
    for line in values:
        passwords = tool_passwords(shell_words((line,)), REDACTED, anywhere=False, bare=False)
        found += [x for _, _, password in passwords for x in unquoted(password)]
    found += [value for arg in args for value in _quoted_pairs(arg)]
    return tuple(dict.fromkeys(found))


# What makes a value more than one word: white space, or a quote a shell would take out.
_SPLIT = re.compile(r"[\s'\"]")


def secrets_in_line(value: str) -> tuple[str, ...]:
    """What ``secrets_in`` finds in a variable's value, and the values of the secret options
    it holds read as a shell line: an --env value or a machine variable that a script passes on
    as arguments (``NOTE='curl --token X'``; ``--max-tokens 5`` is no secret). One without
    white space or quotes is one word (``--token=X``), not split: dtrun reads every variable of
    this machine at each start, LS_COLORS's hundreds of ``;`` too."""
    words = line_secrets((value,)) if _SPLIT.search(value) else scan_args((value,))[1]
    return tuple(dict.fromkeys([*secrets_in(value), *words]))

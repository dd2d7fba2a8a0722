"""The one table of secret shapes the redaction tests plant (tests/unit/test_redact.py: each
shape in each encoding; tests/unit/test_secrets.py and tests/e2e/test_secrets.py: through every
input of dtrun, grepping every sink), and the generated table of secret program arguments
(``GENERATED``: every case style x separator x value prefix x secret word, and credentials in
header arguments), of which ``SHAPES`` holds a slice for the launches.

A shape's ``secret`` is what must never be seen. It is checked by its *cores*: its runs of 8 or
more letters and digits, which no quoting or escaping changes, so a leak in any encoding
(shell, JSON, repr, URL, HTML, one line of several) still shows a core. Each core is unique
to its shape and appears nowhere else (not in a variable's name, not in a host name).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote, quote_plus


def _pem(seed: str, kind: str = "PRIVATE KEY") -> str:
    """A PEM-shaped private key (not a real one): 64-character base64 lines holding / and +."""
    body = base64.b64encode(
        b"".join(hashlib.sha512(f"{seed}{i}".encode()).digest() for i in range(5))
    )
    lines = [body[i : i + 64].decode() for i in range(0, len(body), 64)]
    return "\n".join([f"-----BEGIN {kind}-----", *lines, f"-----END {kind}-----"])


@dataclass(frozen=True)
class Shape:
    name: str
    secret: str  # never seen anywhere dtrun writes, prints or uploads (checked by its cores)
    env: tuple[tuple[str, str], ...] = ()  # planted as --env NAME=VALUE
    args: tuple[str, ...] = ()  # planted as `dtrun run` program arguments
    machine: tuple[tuple[str, str], ...] = ()  # planted in dtrun's own environment
    # also planted as a hosts file's `jump: alice:SECRET@host` and `--results
    # s3://KEY:SECRET@bucket/p` (both refused, the secret unshown)
    credential: bool = False

    @property
    def cores(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(re.findall(r"[A-Za-z0-9]{8,}", self.secret)))


PEM_A = _pem("tls")
PEM_B = _pem("service-account", "RSA PRIVATE KEY")
GHP = "ghp_" + "Gh7TokenCore" * 3
SK = "sk-ArgKeyCore" + "x" * 16
SERVICE_ACCOUNT = json.dumps(
    {"type": "service_account", "client_email": "sa@proj.example", "private_key": PEM_B}
)

# The generated table (issue 36): a program argument's secret recognised by its shape, not only
# by a name listed in the old rules. Each shape's secret is unique: Gen<n>Core.
SECRET_WORDS = ("password", "passphrase", "secret", "token", "key", "credential", "pw", "pwd",
                "auth")  # fmt: skip
CASE_STYLES: dict[str, Callable[[tuple[str, ...]], str]] = {
    "kebab": lambda words: "-".join(words),
    "snake": lambda words: "_".join(words),
    "camel": lambda words: words[0] + "".join(word.capitalize() for word in words[1:]),
    "upper": lambda words: "_".join(word.upper() for word in words),
}
SEPARATORS = ("space", "=")
VALUE_PREFIXES = {"plain": "{}", "dash": "-{}", "single quotes": "'{}'", "double quotes": '"{}"'}
HEADER_SCHEMES = ("Bearer", "Token", "Basic")
# How a header reaches a program's arguments: curl's -H, a long option, one with =, -H glued.
HEADER_FORMS: dict[str, Callable[[str], tuple[str, ...]]] = {
    "--hdr H": lambda header: ("--hdr", header),
    "-H H": lambda header: ("-H", header),
    "--header=H": lambda header: (f"--header={header}",),
    "-HH": lambda header: (f"-H{header}",),
}
# Headers that carry a credential without a scheme.
PLAIN_HEADERS = ("X-Api-Key", "X-Auth-Token", "Private-Token", "Cookie")


def _option_shapes() -> list[Shape]:
    """Each secret word alone (--password) and in a two-word name (--access-password), in each
    case style that writes it differently, each separator and each value prefix."""
    names = {
        "--" + write(words): style
        for word in SECRET_WORDS
        for words in ((word,), ("access", word))
        for style, write in CASE_STYLES.items()
    }
    shapes: list[Shape] = []
    for name, style in names.items():
        for separator in SEPARATORS:
            for prefix, form in VALUE_PREFIXES.items():
                core = f"Gen{len(shapes):03d}Core"
                value = form.format(core)
                args = (f"{name}={value}",) if separator == "=" else (name, value)
                # what the program is given: the dash is part of it, quotes may be taken off
                secret = value if prefix == "dash" else core
                shapes.append(Shape(f"{name} {style}, {separator}, {prefix}", secret, args=args))
    return shapes


def _header_shapes(start: int) -> list[Shape]:
    shapes: list[Shape] = []
    headers = [
        (f"{name} {scheme}", f"{name}: {scheme} {{}}")
        for name in ("Authorization", "Proxy-Authorization")
        for scheme in HEADER_SCHEMES
    ] + [(name, f"{name}: {{}}") for name in PLAIN_HEADERS]
    for label, header in headers:
        for how, args in HEADER_FORMS.items():
            core = f"Gen{start + len(shapes):03d}Core"
            # Basic carries base64 of user:password (RFC 7617); the others an opaque token
            secret = base64.b64encode(f"u:{core}".encode()).decode() if "Basic" in label else core
            shapes.append(Shape(f"{label} as {how}", secret, args=args(header.format(secret))))
    return shapes


def _generated() -> tuple[Shape, ...]:
    options = _option_shapes()
    return (*options, *_header_shapes(len(options)))


GENERATED = _generated()

SHAPES: tuple[Shape, ...] = (
    Shape("secret name", "Hunter2Password", env=(("DB_PASS", "Hunter2Password"),),
          credential=True),
    Shape("secret name part", "PatValueCore123", env=(("GITHUB_PAT", "PatValueCore123"),)),
    Shape(
        "quotes and shell characters",
        "Quote7Part'Dquote7Part\"Dollar7Part$`Back7Part\\Bslash7Part",
        env=(("DB_PASSWORD", "Quote7Part'Dquote7Part\"Dollar7Part$`Back7Part\\Bslash7Part"),),
        credential=True,
    ),
    Shape("multi-line PEM key", PEM_A, env=(("TLS_PRIVATE_KEY", PEM_A),)),
    Shape("PEM inside JSON", PEM_B, env=(("SERVICE_ACCOUNT_JSON", SERVICE_ACCOUNT),)),
    Shape(
        "URL password with /",
        "SlashPart01/SlashPart02",
        env=(("MLFLOW_TRACKING_URI", "https://bob:SlashPart01/SlashPart02@mlflow.example/x"),),
        credential=True,
    ),
    Shape(
        "URL password with @",
        "AtPart0001@AtPart0002",
        env=(("PROXY_URL", "https://bob:AtPart0001@AtPart0002@proxy.example:8080/"),),
        credential=True,
    ),
    Shape(
        "URL password, URL-encoded",
        "EncPart0001@EncPart0002",
        env=(("HUB_URL", "https://u:EncPart0001%40EncPart0002@hub.example/simple"),),
    ),
    Shape("URL password", "DbPassword99", env=(("DATABASE_URL", "postgres://dbu:DbPassword99@db/x"),)),
    Shape(
        "secret reused in a plain variable",
        "Wandb0Reused0Key",
        env=(("WANDB_API_KEY", "Wandb0Reused0Key"), ("ECHO_CMD", "wandb login Wandb0Reused0Key")),
    ),
    Shape("token shape in a value", GHP, env=(("NOTE", f"token {GHP} here"),)),
    Shape("AWS key id", "AKIAQWERTYUIOPASDFGH", env=(("HINT", "AKIAQWERTYUIOPASDFGH"),)),
    # a plain variable holding a command line or options: its secret options' values
    Shape("secret option in a value", "EnvOpt0Token0Core",
          env=(("CURL_CMD", "curl --token EnvOpt0Token0Core https://hub.example"),)),
    Shape("quoted secret option in a value", "EnvOpt0HfTok0Core",
          env=(("EXTRA", '"--hf-token EnvOpt0HfTok0Core"'),)),
    Shape("secret key of JSON in a value", "JsonKey0Secret0Core",
          env=(("TRAIN_CONFIG", '{"api_key": "JsonKey0Secret0Core", "max_tokens": 5}'),)),
    # well-known tools' short-flag passwords, keyed by the tool before the flag
    Shape("curl -u's password in a value", "CurlUser0Pw0Core",
          env=(("FETCH_CMD", "curl -fsS -u bob:CurlUser0Pw0Core https://hub.example/x"),)),
    Shape("mysql -p attached in a value", "MysqlPw0Core",
          env=(("DUMP_CMD", "mysqldump -uroot -pMysqlPw0Core train > /tmp/t.sql"),)),
    Shape("mysql --password= in a value", "MysqlEq0Pw0Core",
          env=(("MIGRATE_CMD", "mysql --password=MysqlEq0Pw0Core -h db train"),)),
    Shape("mysql -p after docker exec in a value", "DockerExec0Pw0Core",
          env=(("DB_SHELL", "docker exec -it db mysql -uroot -pDockerExec0Pw0Core"),)),
    Shape("sshpass -p in a shell line argument", "SshpassPw0Core",
          args=("--setup", "sshpass -p SshpassPw0Core ssh -p 2222 node1 true")),
    Shape("redis-cli -a in a shell line argument", "RedisCliPw0Core",
          args=("--cache-cmd", "redis-cli -h cache -a 'RedisCliPw0Core' ping")),
    Shape("curl --user's password as arguments", "CurlLong0Pw0Core",
          args=("curl", "--user", "alice:CurlLong0Pw0Core", "https://hub.example/x")),
    Shape("secret option", SK, args=("--api-key", SK)),
    Shape("secret option=", "ArgTokenValue99", args=("--hub-token=ArgTokenValue99",)),
    Shape("URL in an argument", "ArgUrlPass99", args=("--db", "postgres://u:ArgUrlPass99@db/x")),
    Shape("secret key of a dict in an argument", "DictKey0Secret0Core",
          args=("--config", "{'hf_token': 'DictKey0Secret0Core', 'key_dim': 64}")),
    Shape(
        "URL in this machine's environment",
        "MachinePass77",
        machine=(("MY_SERVICE_URL", "https://alice:MachinePass77@svc/x"),),
    ),
    Shape(
        "secret name in this machine's environment",
        "GpgPassphrase0Core",
        machine=(("GPG_PASSPHRASE", "GpgPassphrase0Core"),),
    ),
    Shape(
        "secret name among this machine's run settings",
        "TorchHub0TokenCore",
        machine=(("TORCH_HUB_TOKEN", "TorchHub0TokenCore"),),
    ),
    Shape(
        "secret option among this machine's run settings",
        "MachineOpt0Core",
        machine=(("PYSPARK_SUBMIT_ARGS",
                  "--conf spark.hadoop.fs.s3a.secret.key=MachineOpt0Core pyspark-shell"),),
    ),
    Shape(
        "token in this machine's environment",
        "xoxb-1234567890-MachineSlackCore",
        machine=(("SOME_SETTING", "xoxb-1234567890-MachineSlackCore"),),
    ),
)  # fmt: skip

# The generated table's slice that the launches and the one-table tests plant too: the issue's
# own examples and one of each case style, separator, prefix and header scheme.
SLICE = tuple(
    shape
    for shape in GENERATED
    if shape.args[0] in ("--password", "--accessToken", "--ACCESS_PASSPHRASE")
    or shape.args[0].startswith(("--access_pw=", "--hdr"))
)
SHAPES = (*SHAPES, *SLICE)

ENV = tuple(pair for shape in SHAPES for pair in shape.env)
ENV_ARGS = tuple(arg for name, value in ENV for arg in ("--env", f"{name}={value}"))
PROGRAM_ARGS = tuple(arg for shape in SHAPES for arg in shape.args)
MACHINE = tuple(pair for shape in SHAPES for pair in shape.machine)
CREDENTIALS = tuple(shape for shape in SHAPES if shape.credential)
CORES = tuple(dict.fromkeys(core for shape in (*SHAPES, *GENERATED) for core in shape.cores))


def leaks(text: str | bytes) -> list[str]:
    """The cores of every planted secret that ``text`` shows."""
    body = text.decode(errors="replace") if isinstance(text, bytes) else text
    return [core for core in CORES if core in body]


def base64_leaks(text: str) -> list[str]:
    """The cores of every planted secret that a run of base64 digits in ``text`` decodes to,
    at any of its four digit alignments, in either alphabet: what a reader of a log could
    decode. A mask (``<redacted>``) ends a run, so a masked core decodes to nothing whole."""
    found = []
    for run in re.findall(r"[A-Za-z0-9+/_-]{4,}", text):
        digits = run.translate(str.maketrans("-_", "+/"))
        for start in range(4):
            chunk = digits[start:]
            chunk = chunk[: len(chunk) - (len(chunk) % 4 == 1)]  # a lone last digit holds no byte
            body = base64.b64decode(chunk + "=" * (-len(chunk) % 4)).decode(errors="replace")
            found += [core for core in CORES if core in body]
    return found


def hex_leaks(text: str) -> list[str]:
    """The cores of every planted secret that a run of hexadecimal digits in ``text`` decodes
    to, at either nibble alignment, in either case: what a reader of a hex dump could decode."""
    found = []
    for run in re.findall(r"[0-9A-Fa-f]{2,}", text):
        for start in range(2):
            chunk = run[start:]
            body = bytes.fromhex(chunk[: len(chunk) - len(chunk) % 2]).decode(errors="replace")
            found += [core for core in CORES if core in body]
    return found


def _in_shell_double_quotes(text: str) -> str:
    return '"' + "".join("\\" + c if c in '$`"\\' else c for c in text) + '"'


# How a value reaches text: as dtrun's renderer, its records and reports, and a program write it.
ENCODINGS: dict[str, Callable[[str], str]] = {
    "raw": lambda v: v,
    "shlex.quote": shlex.quote,
    "inside a longer shell word": lambda v: shlex.quote(f"wandb login {v} --relogin"),
    "shell double quotes": _in_shell_double_quotes,
    "json.dumps": json.dumps,
    "json.dumps, UTF-8": lambda v: json.dumps(v, ensure_ascii=False),
    "JSON inside shell quotes": lambda v: shlex.quote(json.dumps({"value": v})),
    "JSON of JSON": lambda v: json.dumps(json.dumps(v)),
    "repr": repr,
    "repr of a list (print(sys.argv))": lambda v: repr(["--x", v]),
    "URL-encoded": lambda v: quote(v, safe=""),
    "URL path": quote,
    "form-encoded": quote_plus,
    "HTML": html.escape,
    "Markdown cell": lambda v: v.replace("|", "\\|"),
}


def planted(shape: Shape) -> list[str]:
    """Every string a shape is given to dtrun as, and its secret alone."""
    return [shape.secret, *(value for _, value in (*shape.env, *shape.machine)), *shape.args]


def every_encoding(values: list[str]) -> str:
    """Text holding each value in each encoding, one per line (a program's log, a script)."""
    return "".join(
        f"{how}: {encode(value)}\n" for value in values for how, encode in ENCODINGS.items()
    )

"""runner/redact/ alone: which names and values are secret, and every shape of
tests/secret_shapes.py masked in every encoding a renderer, a record or a program writes it in.
Fast: no launch, no CLI (tests/e2e/test_secrets.py plants the same shapes through dtrun)."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dtrun import redact
from dtrun.redact import (
    REDACTED,
    Redactor,
    is_secret_name,
    redact_args,
    redact_env,
    redact_value,
    redact_var,
    secret_args,
    secret_values,
    secrets_in_environment,
)
from dtrun.spec.request import Program, ProgramKind, RunSpec
from tests.secret_shapes import (
    ENCODINGS,
    ENV,
    GHP,
    MACHINE,
    PEM_A,
    PROGRAM_ARGS,
    SHAPES,
    leaks,
    planted,
)

SPEC = RunSpec("r", env=ENV, program=Program(ProgramKind.SCRIPT, "t.py", PROGRAM_ARGS))
# what dtrun knows as secret for a command given the table's inputs (runner/cli/bench.py)
HIDE = Redactor.of([*SPEC.secrets(), *secrets_in_environment(dict(MACHINE))])


@pytest.mark.parametrize("shape", SHAPES, ids=[shape.name for shape in SHAPES])
def test_every_shape_is_masked_in_every_encoding_and_line_by_line(shape):
    shown = {}
    for value in planted(shape):
        for how, encode in ENCODINGS.items():
            text = f"before {encode(value)} after"
            shown[how, value] = HIDE.text(text)
            # a program printing a multi-line value: each line reaches the log on its own
            for number, line in enumerate(text.splitlines()):
                shown[f"{how}, line {number}", value] = HIDE.text(line)
    assert {key: text for key, text in shown.items() if leaks(text)} == {}


def test_the_shape_table_leaks_unless_redacted():
    """The cores are seen when nothing is masked: the test above can fail."""
    for shape in SHAPES:
        assert leaks(json.dumps(planted(shape))), shape.name


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("https://bob:Slash/Pw0rd@h/x", f"https://{REDACTED}@h/x"),
        ("https://bob:At@Pw0rd@h/x", f"https://{REDACTED}@h/x"),
        ("see 'https://bob:Quo'te@h/x' now", f"see 'https://{REDACTED}@h/x' now"),
        ('{"a": "postgres://u:p@db/x", "b": "c@d"}',
         f'{{"a": "postgres://{REDACTED}@db/x", "b": "c@d"}}'),
        ("https://tok3n@github.com/o/r", f"https://{REDACTED}@github.com/o/r"),
        ("https://medium.com/@user/post", "https://medium.com/@user/post"),
        ("s3://bucket/users/a@b.com", "s3://bucket/users/a@b.com"),
        ("http://localhost:8000/x", "http://localhost:8000/x"),
        ("https://hooks.slack.com/services/T0AB/B0CD/Xy12Zw34", f"https://{REDACTED}"),
    ],
)  # fmt: skip
def test_url_credentials_are_hidden_to_the_last_at_before_the_host(text, shown):
    assert redact_value(text) == shown


@pytest.mark.parametrize(
    ("name", "secret"),
    [("DB_PASS", True), ("GITHUB_PAT", True), ("SMTP_PWD", True), ("HF_TOKEN", True),
     ("GPG_PW", True), ("GPG_PASSPHRASE", True), ("dbPw", True), ("DB_CREDS", True),
     ("SSHPASS", True), ("sshpass", True),  # sshpass -e reads the password from it
     ("PATH", False), ("COMPASS_DIR", False), ("PASSAGE", False), ("OMP_NUM_THREADS", False),
     ("PWD", False), ("SSH_AUTH_SOCK", False), ("XDG_SESSION_TYPE", False)],
)  # fmt: skip
def test_secret_names_are_matched_on_their_parts(name, secret):
    assert is_secret_name(name) is secret


def test_a_spec_shows_no_fragment_of_its_secrets_in_any_value_or_argument():
    shown = SPEC.redacted()
    assert dict(shown.env)["ECHO_CMD"] == f"wandb login {REDACTED}"
    assert dict(shown.env)["SERVICE_ACCOUNT_JSON"] == (
        f'{{"type": "service_account", "client_email": "sa@proj.example", "private_key": '
        f'"{REDACTED}"}}'
    )
    assert dict(shown.env)["TLS_PRIVATE_KEY"] == REDACTED
    assert leaks(repr(shown)) == []


def test_env_and_arguments_keep_what_is_not_secret():
    env = (("DB_PASS", "hunter2pass"), ("NOTE", "see https://u:pw12345@h/x"), ("LR", "3e-4"))
    assert redact_env(env) == (
        ("DB_PASS", REDACTED), ("NOTE", f"see https://{REDACTED}@h/x"), ("LR", "3e-4"),
    )  # fmt: skip
    assert set(secret_values(env)) >= {"hunter2pass", "pw12345"}
    args = ("--api-key", "sk-" + "x" * 24, "--hub=ghp_" + "a" * 24, "--lr", "3e-4")
    assert redact_args(args) == ("--api-key", REDACTED, f"--hub={REDACTED}", "--lr", "3e-4")
    assert redact_args(("--tokenizer", "gpt2")) == ("--tokenizer", "gpt2")


def test_a_secret_option_inside_a_shell_line_argument_is_secret_and_masked():
    """`dtrun run -- bash -c 'train --hf-token X'`, or `"--token X"` as one argument: the
    line's words are read as a shell splits them (as `dtrun exec`'s are)."""
    args = ("-c", "python t.py --hf-token Zq9vXw7LmN3pRt --lr 3", "--api-key Yk8uWv6KjM2oQs")
    assert {"Zq9vXw7LmN3pRt", "Yk8uWv6KjM2oQs"} <= set(secret_args(args))
    assert redact_args(args) == ("-c", f"python t.py --hf-token {REDACTED} --lr 3",
                                 f"--api-key {REDACTED}")  # fmt: skip
    spec = RunSpec("r", program=Program(ProgramKind.EXECUTABLE, "bash", args))
    assert "Zq9vXw7LmN3pRt" not in repr(spec.redacted())


def test_a_secret_option_quoted_inside_a_shell_line_argument_is_secret():
    """`bash -c 'run "--token X"'`: a word quoted inside the line is read as a line too."""
    args = ("-c", 'run "--token Nq5vXw7LmN3pRt" --lr 3')
    assert "Nq5vXw7LmN3pRt" in secret_args(args)
    assert redact_args(args) == ("-c", f'run "--token {REDACTED}" --lr 3')


def test_a_plain_variable_s_secret_options_are_secret_and_its_counts_stay():
    """An --env value or a machine variable holding a command line or options (`NOTE='curl
    --token X'`, `EXTRA='"--hf-token X"'`): read as a shell line; `--max-tokens 5` stays."""
    env = (
        ("NOTE", "curl --token X9f8e7d6c5b4a3"),
        ("EXTRA", '"--hf-token Ab3dEf1234zz"'),
        ("FLAGS", "--max-tokens 5 --pad-token-id 0"),
    )
    assert {"X9f8e7d6c5b4a3", "Ab3dEf1234zz"} == set(secret_values(env))
    assert redact_env(env) == (
        ("NOTE", f"curl --token {REDACTED}"), ("EXTRA", f'"--hf-token {REDACTED}"'),
        ("FLAGS", "--max-tokens 5 --pad-token-id 0"),
    )  # fmt: skip
    conf = "--conf spark.ssl.keyStorePassword=Mc7hOpt99 --conf spark.ssl.keyStore=/etc/ks.jks"
    assert redact_var("SPARK_SUBMIT_OPTS", conf) == conf.replace("Mc7hOpt99", REDACTED).replace(
        "/etc/ks.jks", REDACTED
    )  # the record hides a key store's path as an argument's
    machine = {"SPARK_SUBMIT_OPTS": conf, "FLAGS": "--max-tokens 5"}
    assert secrets_in_environment(machine, lambda value: value == "/etc/ks.jks") == ("Mc7hOpt99",)


def test_a_secret_named_key_of_json_or_a_dict_in_a_value_or_argument_is_secret():
    """`--env CONFIG='{"api_key": "X"}'`, `--config "{'hf_token': 'X'}"`: the key's value is
    secret, as written and as a program that loads the JSON prints it; counts and kinds stay."""
    env = (("CONFIG", '{"api_key": "Jk7Secret0Val", "token_type": "bearer", "max_tokens": "5"}'),)
    assert secret_values(env) == ("Jk7Secret0Val",)
    assert redact_env(env) == (("CONFIG", env[0][1].replace("Jk7Secret0Val", REDACTED)),)
    args = ("--config", "{'hf_token': 'Dk8Secret0Val', 'key_dim': 64}")
    assert redact_args(args) == ("--config", f"{{'hf_token': '{REDACTED}', 'key_dim': 64}}")
    assert "Pw9\u00e9Secret" in secret_values((("C", '{"password": "Pw9\\u00e9Secret"}'),))


def test_a_command_line_quoted_as_the_program_s_one_word_has_its_secrets_masked():
    """`dtrun run -- "python t.py --hf-token X"`: the whole line is the program's name, shown
    by the plan, the record and the error that it is not found."""
    spec = RunSpec("r", program=Program(ProgramKind.EXECUTABLE, "t.sh --hf-token Zq9vXw7LmN3pRt"))
    assert "Zq9vXw7LmN3pRt" in spec.secrets()
    assert spec.redacted().program.target == f"t.sh --hf-token {REDACTED}"


def test_a_secret_option_before_a_shell_operator_is_secret_without_the_operator():
    """`dtrun exec -- "echo --token X; nvidia-smi"`: the value a shell passes is X, not X;
    (a node printing X back showed it whole)."""
    lines = ("echo --token Zq9vXw7LmN3pRt; ls", "a --token Zq9vXw7LmN3pRt&&b",
             "a 'b --token Zq9vXw7LmN3pRt|c")  # the last with a quote left open  # fmt: skip
    for line in lines:
        assert "Zq9vXw7LmN3pRt" in secret_args((line,)), line


@pytest.mark.parametrize(
    ("args", "shown"),
    [(("curl", "-u", "bob:Passw0rd", "https://h/x"), ("curl", "-u", f"bob:{REDACTED}", "https://h/x")),
     (("curl", "-fsSu", "bob:Passw0rd"), ("curl", "-fsSu", f"bob:{REDACTED}")),
     (("curl", "-kubob:Passw0rd"), ("curl", f"-kubob:{REDACTED}")),
     (("/usr/bin/curl", "--user=bob:Pass:w0rd"), ("/usr/bin/curl", f"--user=bob:{REDACTED}")),
     (("curl", "-U", "px:Passw0rd"), ("curl", "-U", f"px:{REDACTED}")),
     (("sshpass", "-pPassw0rd", "ssh", "-p", "2222", "h"),
      ("sshpass", f"-p{REDACTED}", "ssh", "-p", "2222", "h")),
     (("mysql", "-uroot", "-pPassw0rd", "db"), ("mysql", "-uroot", f"-p{REDACTED}", "db")),
     (("redis-cli", "-a", "Passw0rd", "ping"), ("redis-cli", "-a", REDACTED, "ping")),
     (("docker", "login", "-u", "bob", "-p", "Passw0rd", "reg.io"),
      ("docker", "login", "-u", "bob", "-p", REDACTED, "reg.io")),
     (("7z", "x", "-pPassw0rd", "d.7z"), ("7z", "x", f"-p{REDACTED}", "d.7z"))],
)  # fmt: skip
def test_a_well_known_tool_s_short_flag_password_is_hidden_and_the_user_stays(args, shown):
    """`curl -u bob:PW` (the user stays), `sshpass -p PW`, `mysql -pPW`, `redis-cli -a PW`:
    the password is the flag's because of the tool named before it."""
    assert redact_args(args) == shown
    assert {"Passw0rd", "Pass:w0rd"} & set(secret_args(args))


@pytest.mark.parametrize(
    ("line", "shown"),
    [("docker -H tcp://x login -p Passw0rd", f"docker -H tcp://x login -p {REDACTED}"),
     ("docker --host=tcp://x -D login -u bob -p Passw0rd r.io",
      f"docker --host=tcp://x -D login -u bob -p {REDACTED} r.io"),
     ("docker --config /c --context ci -l debug login -p Passw0rd",
      f"docker --config /c --context ci -l debug login -p {REDACTED}"),
     ("docker -c ci --tls --tlscacert ca.pem login -p Passw0rd",
      f"docker -c ci --tls --tlscacert ca.pem login -p {REDACTED}"),
     ("aws --profile d configure set aws_secret_access_key Passw0rd",
      f"aws --profile d configure set aws_secret_access_key {REDACTED}")],
)  # fmt: skip
def test_a_tool_s_own_options_before_its_subcommand_keep_its_password_found(line, shown):
    """`docker -H tcp://x login -p PW`: docker's options (and their values) may come before
    `login`, as aws's before `configure`; the password was shown."""
    assert redact_args(tuple(line.split())) == tuple(shown.split())
    assert secret_args(("bash", "-c", line)) == ("Passw0rd",)


@pytest.mark.parametrize(
    "line",
    [
        "docker -H tcp://x run -p 8080:80 img",
        "docker --context login run -p 8080:80 img",
        "docker -l debug logs -p",
    ],
)
def test_a_tool_s_own_option_values_are_not_taken_for_its_subcommand(line):
    """`docker --context login run -p 8080:80`: `login` is the context's name, and -p a port."""
    assert secret_args(tuple(line.split())) == ()


@pytest.mark.parametrize(
    "args",
    [("python", "train.py", "-p", "4", "-u", "bob:x1"), ("torchrun", "-p", "29500"),
     ("mysql", "-p", "train"), ("curl", "-u", "bob", "https://h/x"), ("curl", "--user-agent=a:b"),
     ("curl", "-HAccept: a:b", "-o/tmp/u:v"),
     ("-c", "sshpass -f pw.txt ssh -p 2222 h; ls -p /tmp"), ("ssh", "h", "redis-cli", "ping"),
     ("docker", "run", "-p", "8080:80", "img"), ("7z", "x", "-p", "d.7z"),
     ("htpasswd", "-c", "f", "bob"), ("htpasswd", "-n", "bob"), ("wandb", "login", "--relogin"),
     ("aws", "configure", "set", "region", "eu-west-1"),
     ("mysql", "--password", "train"), ("mysqldump", "--password", "-h", "db", "train"),
     ("bash", "-c", "mysql --pass train && mariadb --password1 -u bob db"),
     ("bash", "-c", "echo sshpass -p password-file; cat password-file"),
     ("bash", "-c", "echo use sshpass -p 2222 then ssh -p 2222 h"),
     ("bash", "-c", "srun -N 2 hostname; echo sshpass -p password-file"),
     ("-c", "apt-get install -y sshpass redis-cli -a; ls -a")],
)  # fmt: skip
def test_the_same_short_flags_elsewhere_stay_visible(args):
    """A port, a count or a user elsewhere; `mysql -p DB` and `mysql --password DB` prompt, DB
    is the database (mysql(1)); curl without a password prompts for it. A tool's name in a line
    where no command starts is a word (`echo sshpass -p FILE`): FILE was masked in every log."""
    assert redact_args(args) == args
    assert secret_args(args) == ()


@pytest.mark.parametrize(
    ("line", "shown"),
    [("htpasswd -b f bob Passw0rd", f"htpasswd -b f bob {REDACTED}"),
     ("htpasswd -nb bob Passw0rd", f"htpasswd -nb bob {REDACTED}"),
     ("htpasswd -cbB -C 10 f bob Passw0rd && ls", f"htpasswd -cbB -C 10 f bob {REDACTED} && ls"),
     ("wandb login --host https://w.io Passw0rd", f"wandb login --host https://w.io {REDACTED}"),
     ("aws configure set aws_secret_access_key Passw0rd",
      f"aws configure set aws_secret_access_key {REDACTED}"),
     ("aws configure set --profile d default.aws_session_token Passw0rd",
      f"aws configure set --profile d default.aws_session_token {REDACTED}")],
)  # fmt: skip
def test_a_password_a_well_known_tool_takes_as_a_bare_argument_is_hidden(line, shown):
    """`htpasswd -b FILE USER PW`, `htpasswd -nb USER PW`, `wandb login KEY` and `aws configure
    set aws_secret_access_key KEY` take the secret with no flag before it: hidden as an
    argument, in a shell line and in an --env value."""
    assert redact_args(tuple(line.split())) == tuple(shown.split())
    assert redact_args(("bash", "-c", line)) == ("bash", "-c", shown)
    assert redact_env((("SETUP", line),)) == (("SETUP", shown),)


@pytest.mark.parametrize(
    "args",
    [("echo", "wandb login failed, retrying"), ("git", "commit", "-m", "wandb login problems"),
     ("bash", "-c", "echo htpasswd -b f bob Passw0rd"),
     ("bash", "-c", "grep -c 'aws configure set aws_secret_access_key Passw0rd' notes.md")],
)  # fmt: skip
def test_a_bare_argument_tool_named_where_no_command_starts_hides_nothing(args):
    """`echo wandb login failed, retrying`: wandb, htpasswd and aws are the tools only where a
    command starts, so `failed,` was hidden as wandb's key in a message that only names it."""
    assert secret_args(args) == ()
    assert redact_args(args) == args


@pytest.mark.parametrize(
    "line",
    ["sudo -u bob htpasswd -b f bob Passw0rd", "env WANDB_MODE=online wandb login Passw0rd",
     "ls; nohup wandb login Passw0rd", "cd /x && time wandb login Passw0rd",
     "(wandb login Passw0rd)", "WANDB_HOST=x wandb login Passw0rd",
     "timeout 60 sudo -E wandb login Passw0rd", "ssh -p 22 node1 wandb login Passw0rd",
     "if true; then wandb login Passw0rd; fi", "echo x | xargs -n1 wandb login Passw0rd"],
)  # fmt: skip
def test_a_bare_argument_tool_after_a_command_that_runs_it_is_still_found(line):
    """sudo, env, nohup, time, timeout, ssh, xargs and a variable before it run the tool: it
    starts a command there, as after `;`, `&&`, `(` and `then`."""
    assert secret_args(("bash", "-c", line)) == ("Passw0rd",)


@pytest.mark.parametrize(
    "args",
    [("bash", "-c", "docker exec -e A=1 -it db mysql -uroot -pPassw0rd"),
     ("bash", "-c", "kubectl exec -n ml -it db -- mysql -pPassw0rd"),
     ("bash", "-c", "ls; ssh -p 22 h sshpass -p Passw0rd ssh h"),
     ("python", "t.py", "--setup", "sshpass -p Passw0rd ssh -p 2222 h"),
     ("bash", "-c", "python t.py --setup 'redis-cli -a Passw0rd ping'"),
     ("python", "launch.py", "curl", "-u", "bob:Passw0rd", "https://h/x"),
     ("bash", "-c", "mysql --password=Passw0rd train"),
     ("python", "migrate.py", "--engine", "mysql", "--password", "Passw0rd"),
     ("bash", "-c", "python migrate.py --engine mysql --password Passw0rd")],
)  # fmt: skip
def test_a_short_flag_tool_where_a_command_starts_or_a_program_s_argument_is_found(args):
    """Where a command starts (after `docker exec C`, `kubectl exec P --`, ssh), an option's
    value that is a line the tool starts, and a program's own arguments, which it may run;
    `--password X` is mysql's flag only where mysql is the command, not a program's word."""
    assert secret_args(args) == ("Passw0rd",)


@pytest.mark.parametrize(
    "args",
    [("bash", "-c", "stdbuf -oL curl -u bob:Passw0rd https://h/x"),
     ("bash", "-c", "srun -N 2 sshpass -p Passw0rd ssh h"),
     ("bash", "-c", "mpirun -np 4 -x A curl -fsSLu bob:Passw0rd https://h/x"),
     ("bash", "-c", "echo `sshpass -p Passw0rd ssh h cat f`"),
     ("python", "t.py", "--setup=sshpass -p Passw0rd ssh h")],
)  # fmt: skip
def test_a_short_flag_tool_after_a_launcher_or_in_backticks_is_found(args):
    """A tool after a launcher whose options dtrun does not list (srun, mpirun, stdbuf), between
    backticks, or in an option's value after `=`: its password showed in every record."""
    assert secret_args(args) == ("Passw0rd",)
    assert "Passw0rd" not in " ".join(redact_args(args))


@pytest.mark.parametrize(
    "line",
    ["wandb login\npython train.py data", "7z x -p d.7z\nls -pla", "mysql -p db\r\nls -pla",
     "wandb login &&\n\npython train.py"],
)  # fmt: skip
def test_a_new_line_of_a_shell_line_ends_a_tool_s_command_as_a_semicolon_does(line):
    """`bash -c 'wandb login<newline>python train.py'`: the next line is a command of its own,
    so `python` was taken for wandb's key and hidden wherever dtrun printed it."""
    assert secret_args(("bash", "-c", line)) == ()
    assert redact_args(("bash", "-c", line)) == ("bash", "-c", line)


def test_a_tool_run_as_the_program_has_its_short_password_hidden_where_it_stands():
    """`dtrun run -- curl -u bob:PW URL`: the tool is the program's target, not an argument,
    and a password under 6 characters is hidden only where its flag says (SHORTEST)."""
    for target, args, shown in (
        ("curl", ("-u", "bob:ab12", "https://h/x"), ("-u", f"bob:{REDACTED}", "https://h/x")),
        ("/usr/bin/sshpass", ("-p", "xy12", "ssh", "-p", "22", "h"),
         ("-p", REDACTED, "ssh", "-p", "22", "h")),
    ):  # fmt: skip
        spec = RunSpec("r", program=Program(ProgramKind.EXECUTABLE, target, args))
        assert spec.redacted().program == Program(ProgramKind.EXECUTABLE, target, shown)


@pytest.mark.parametrize(
    "dump",
    [
        json.dumps,
        lambda text: json.dumps(text).replace("/", "\\/"),
        lambda text: repr(text.encode()),
    ],
    ids=["JSON", "JSON escaping /", "repr of bytes"],
)
def test_a_header_credential_a_node_prints_with_escapes_is_hidden_to_its_end(dump):
    """A credential dtrun was not given, found in a node's output by its header's shape and
    written escaped (`Bearer abc\\u00e9Def...`): hidden whole, not up to its first backslash
    (`\\u00e9Esc0Hdr0Core...` showed)."""
    for header in ("Authorization: Bearer abc\u00e9Esc0Hdr0Core/Tail0Hdr0Core\U0001f600x",
                   "X-Api-Key: abc\u00e9Esc0Hdr0Core/Tail0Hdr0Core",
                   "got Bearer abc\u00e9Esc0Hdr0Core/Tail0Hdr0Core"):  # fmt: skip
        printed = dump({"msg": header}) if dump is json.dumps else dump(header)
        assert "Esc0Hdr0Core" in printed and "\\" in printed  # the check can fail
        shown = redact.redact_text(f"[node-0] {printed}")
        assert "Esc0Hdr0Core" not in shown and "Tail0Hdr0Core" not in shown, shown
        assert header.split(" ")[0] in shown and REDACTED in shown


def test_short_numeric_and_boolean_values_are_not_looked_for_in_free_text():
    """TOKENIZERS_PARALLELISM=false is no secret: 'false' stays in every log and record;
    a secret name's value is still hidden where its name is known."""
    env = (("TOKENIZERS_PARALLELISM", "false"), ("HF_TOKEN", "abc"), ("API_PIN", "123456"))
    hide = Redactor.of(secret_values(env))
    text = '{"stopped": false, "pid": 123456, "tokens": "abc"}'
    assert hide.text(text) == text
    assert redact_env(env, hide) == tuple((name, REDACTED) for name, _ in env)


def test_a_short_secret_is_masked_where_its_name_is_written_before_it():
    """A launch script and .deepspeed_env write each --env value after its name: an uploaded
    one shows no value of a secret name, however short; free text without the name keeps it."""
    env = (("SHORT_PASS", "Pw3x9"), ("DB_PIN", "1234"), ("ODD_PW", "a b"), ("LR", "Pw3x9"))
    hide = Redactor.of(secret_values(env))
    script = "export SHORT_PASS=Pw3x9\nexport DB_PIN=1234\nexport ODD_PW='a b'\nexport LR=Pw3x9\n"
    assert hide.text(script) == (
        f"export {REDACTED}\nexport {REDACTED}\nexport {REDACTED}\nexport LR=Pw3x9\n"
    )
    assert hide.text("SHORT_PASS=Pw3x9\n") == f"{REDACTED}\n"  # .deepspeed_env


def test_inlined_images_are_left_whole():
    """report.html's plots are base64: a token shape there by chance must not break one."""
    image = "data:image/png;base64," + "QUtJQUFCQ0RFRkdISUpLTE1OT1A" + "AKIAABCDEFGHIJKLMNOP+/="
    assert redact_value(f'<img src="{image}"> AKIAABCDEFGHIJKLMNOP') == (
        f'<img src="{image}"> {REDACTED}'
    )


def test_records_and_files_are_redacted_whole_and_binary_files_only_of_known_values():
    record = {"env": [["ECHO_CMD", "wandb login Wandb0Reused0Key"]], "n": 3, "ok": True}
    assert HIDE.data(record) == {
        "env": [["ECHO_CMD", f"wandb login {REDACTED}"]],
        "n": 3,
        "ok": True,
    }
    binary = b"\x89PNG\xff\x00Hunter2Password\x00AKIAABCDEFGHIJKLMNOP"
    assert HIDE.body(binary) == b"\x89PNG\xff\x00<redacted>\x00AKIAABCDEFGHIJKLMNOP"


def test_a_log_with_a_byte_that_is_not_utf8_is_still_redacted_as_text():
    """One stray byte (a C library's Latin-1 message) does not make a node log binary: its
    URL credentials, token shapes and wrapped secrets are hidden, every other byte kept."""
    hide = Redactor.of(["Zq9xSecretVal77LongerAbc"])
    log = b"caf\xe9 https://bob:Pw0rdXyz@h/x " + GHP.encode() + b"\nZq9xSecretVal77Lo\nngerAbc\n"
    shown = b"caf\xe9 https://<redacted>@h/x <redacted>\n<redacted>\n<redacted>\n"
    assert hide.body(log) == shown  # the 7 characters after the break too: read with its line


KEY = "Zq9x/Secret~Val!77"  # a storage key's / and a password's ~ and !


@pytest.mark.parametrize(
    ("written", "shown"),
    [
        # a colour between its characters (rich's highlighting), and as dtrun's console shows it
        ("Zq9x/Se\x1b[1;36mcret\x1b[0m~Val!77", REDACTED),
        ("Zq9x/Se\\x1b[1;36mcret~Val!77", REDACTED),
        ("'Zq9x/Se'\"cret~Val!77\"", f"'{REDACTED}\""),  # quotes a shell joins
        ("Zq9x\\/Secret~Val!77", REDACTED),  # JSON with / escaped (ujson, PHP)
        ("Zq9\\u0078/Secret~Val!77", REDACTED),  # one character JSON-escaped
        ("Zq9x%2FSecret%7EVal%2177", REDACTED),  # Java's URLEncoder: ~ too
        ("Zq9x/Secret~Val\\!77", REDACTED),  # a shell's backslash (printf %q)
        ("Zq9x&#47;Secret~Val&#33;77", REDACTED),  # HTML character references
    ],
)  # fmt: skip
def test_a_secret_partly_escaped_or_interrupted_is_masked_where_it_was_written(written, shown):
    assert Redactor.of([KEY]).text(f"key: {written} ok") == f"key: {shown} ok"


@pytest.mark.parametrize("written", ["correct\\ horse\\ battery", "correct\\ horse' 'battery"])
def test_a_passphrase_whose_spaces_a_shell_escapes_is_masked(written):
    """printf %q and `ls` write a space as "\\ ": a passphrase so written is masked whole, as
    one with its ! written "\\!" is."""
    hide = Redactor.of(["correct horse battery"])
    assert hide.text(f"run: login --pass {written} ok") == f"run: login --pass {REDACTED} ok"


# A secret holding a tab and characters past ASCII: JSON (ensure_ascii) writes its tab as \t
# beside \u escapes and a UTF-16 pair, Python's ascii() as \t beside \x and \U escapes.
TAB_AND_ACCENT = "Json0Tab\tJson0Uni\u00e9Json0End\U0001f600Json0Pair"
DUMPED = json.dumps(TAB_AND_ACCENT)


@pytest.mark.parametrize(
    "written",
    [DUMPED[:6] + "\x1b[1;36m" + DUMPED[6:] + "\x1b[0m",
     DUMPED.replace("\\u00e9", "\\u00E9").replace("\\ud83d\\ude00", "\\uD83D\\uDE00"),
     ascii(TAB_AND_ACCENT)],
    ids=["JSON a logger highlights", "JSON with upper-case hex (.NET, Jackson)", "ascii()"],
)  # fmt: skip
def test_a_secret_with_a_tab_and_non_ascii_is_masked_however_json_or_python_escape_it(
    monkeypatch, written
):
    """\t is read as the tab it stands for, beside \u00e9, \ud83d\ude00 and \U0001f600: an
    --env secret so written is masked by the process's redaction."""
    monkeypatch.setattr(redact, "_process", Redactor())
    redact.remember_secrets(secret_values((("DB_PASS", TAB_AND_ACCENT),)))
    assert "Json0" in written  # the check can fail
    shown = redact.redact_text(f"config: {written} ok")
    assert REDACTED in shown and "Json0" not in shown and shown.endswith(" ok"), shown


def test_a_secret_holding_a_backslash_and_a_letter_is_masked_in_json_a_logger_highlights():
    """Its own \\t is no tab: JSON writes it \\\\t, read back as a backslash and a t."""
    secret = "C:\\temp\\Secret0Core"
    dumped = json.dumps(secret)
    written = dumped[:5] + "\x1b[31m" + dumped[5:]
    assert Redactor.of([secret]).text(f"dir {written} ok") == f'dir "{REDACTED}" ok'


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["", "\x1b[31m", "'\"", "''"]),
            st.sampled_from([str, lambda c: c if c.isalnum() else "\\" + c,
                             lambda c: f"%{ord(c):02x}", lambda c: f"\\u{ord(c):04X}",
                             lambda c: f"&#{ord(c)};"]),
        ),
        min_size=len(KEY), max_size=len(KEY),
    )
)  # fmt: skip
def test_any_mix_of_escapes_and_colours_in_a_secret_is_masked_whole(ways):
    """Each character written raw or escaped, colours and quotes between: the secret is masked
    from its first character as written to its last, and nothing around it."""
    written = "".join(
        (cut if index else "") + write(c)
        for index, (c, (cut, write)) in enumerate(zip(KEY, ways, strict=True))
    )
    assert Redactor.of([KEY]).text(f"key: {written} ok") == f"key: {REDACTED} ok"


def test_a_private_key_a_node_prints_line_by_line_is_hidden_on_the_console(monkeypatch):
    """print(key) of a key dtrun was not given: each line reaches the console alone, from the
    BEGIN line to the END line, under torchrun's rank prefix; the lines around it stay."""
    import io

    from dtrun.cli import common
    from dtrun.cli.inert import inert_console_class

    monkeypatch.setattr(common, "_pem_prefixes", {})
    out = io.StringIO()
    lines = ["loaded", *PEM_A.splitlines(), "step 1 loss 2.5"]
    for line in lines:
        common.print_node_line(inert_console_class()(file=out), "node-0", f"[rank0]:{line}")
        common.print_node_line(inert_console_class()(file=out), "node-1", line)
    shown = out.getvalue()
    assert leaks(shown) == [] and "BEGIN" not in shown and "END" not in shown
    assert shown.count(f"[rank0]:{REDACTED}") == len(lines) - 2
    assert "[node-0] [rank0]:loaded" in shown and "[node-1] step 1 loss 2.5" in shown


@pytest.mark.parametrize("piece", ["a-", "ab1-", "x-api-", "a.", "aa+"])
def test_a_long_line_of_hyphenated_words_is_redacted_in_linear_time(piece):
    """A log line of many hyphenated or dotted words (a progress bar, ids, base64url): no rule
    searches it over and over from each word. Four times the line takes about four times as
    long; over eight is quadratic (the URL scheme's and header name's old unbounded runs).
    Timed in this thread's CPU time, best of 5: on a loaded machine the longer run is the one
    more often preempted, and wall time made a linear rule look quadratic (CI: 14.2x)."""

    def best(count: int) -> float:
        text = piece * count
        times = []
        for _ in range(5):
            start = time.thread_time()
            redact_value(text)
            times.append(time.thread_time() - start)
        return min(times)

    assert best(32000) / best(8000) < 8


@pytest.mark.parametrize("value", ["hunter", "hunter2", "Hunter2Password"])
def test_a_short_secret_is_masked_in_base64_at_every_alignment(value):
    """From the shortest value looked for (6 characters): HTTP Basic's "user:" puts a password
    at the third alignment, where its own digits were 5 before its first byte's were counted."""
    import base64

    hide = Redactor.of([value])
    for before in ("", "a", "ab", "user:", "api:"):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode((before + value + "\n").encode()).decode()
            masked = hide.text(encoded)
            assert REDACTED in masked, (before, encoded)
            # what is left decodes to no more than one character of the value
            for left in masked.split(REDACTED):
                assert len(left.rstrip("=")) <= len(encoded) - len(value) * 4 // 3 + 1


SAS = "sv=2024-11-04&sig=AbCdEf0123456789GhIjKlMnOpQrStUv%3D"  # an Azure SAS token's tail


def _shown_of(value: str, shown: str) -> int:
    """The longest run of ``value``'s characters, in order, that ``shown`` still holds."""
    return max(
        (j - i for i in range(len(value)) for j in range(i + 1, len(value) + 1)
         if value[i:j] in shown),
        default=0,
    )  # fmt: skip


@given(
    st.lists(st.integers(1, len(SAS) - 1), min_size=1, max_size=3, unique=True),
    st.sampled_from(["", "    ", "\t"]),
    st.sampled_from(["token: ", "config = {'sas': '", ""]),
)
def test_a_secret_wrapped_across_lines_shows_no_piece_of_8_characters(cuts, indent, before):
    """A logger or rich wrapping a config dump breaks a long secret over lines; each line is
    redacted alone (a node's output, line by line), and none keeps 8 of its characters in a
    row (WRAPPED_SHORTEST)."""
    cuts = sorted(cuts)
    pieces = [SAS[i:j] for i, j in zip([0, *cuts], [*cuts, len(SAS)], strict=True)]
    lines = [before + pieces[0], *(indent + piece for piece in pieces[1:-1])]
    lines.append(indent + pieces[-1] + "', 'lr': 0.1}" if len(pieces) > 1 else "")
    hide = Redactor.of([SAS])
    for line in lines:
        shown = hide.text(line)
        assert _shown_of(SAS, shown) < 8, (line, shown)


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


def _hex(text: str) -> str:
    return text.encode().hex()


@pytest.mark.parametrize(
    ("width", "encode"),
    [(76, _b64), (64, _b64), (60, _hex)],
    ids=["MIME base64 (76)", "PEM base64 (64)", "xxd -p (60)"],
)
@pytest.mark.parametrize("after", ["", "\n", '", "lr": 0.1}'])
def test_a_long_secret_dumped_wrapped_in_base64_or_hex_shows_no_8_of_its_digits(
    width, encode, after
):
    """`base64`, MIME and PEM wrap base64 at 76 or 64 columns, `xxd -p` hex at 60: each line
    of a long secret's dump, redacted alone, keeps no 8 of its digits in a row (the digits its
    own bytes decide: base64's last one may be shared with what follows it)."""
    value = SAS + "&skoid=" + "9f3b2c1d-4e5f" * 6
    digits = encode(value + after)
    own = digits[: len(value) * 4 // 3] if encode is _b64 else encode(value)
    lines = [digits[i : i + width] for i in range(0, len(digits), width)]
    assert len(lines) >= 3 and own in "".join(lines)  # the dump holds it, across its lines
    hide = Redactor.of([value])
    for line in lines:
        shown = hide.text(line)
        assert _shown_of(own, shown) < 8, (line, shown)


def test_a_secret_where_a_failed_nodes_quoted_log_line_is_cut_is_masked():
    """A node's error quotes its log's lines cut at 240 characters with "…": a secret the cut
    runs through shows no piece of 8 characters, as at a line break."""
    from dtrun.execute.failure import LINE_CHARS, explain

    for at in (LINE_CHARS - 30, LINE_CHARS - 9):
        line = "RuntimeError: no hub " + "x" * (at - 28) + " token=" + SAS + " end"
        shown = Redactor.of([SAS]).text(explain(f"step 1\n{line}\n"))
        assert shown.endswith(f" token={REDACTED}…") and _shown_of(SAS, shown) < 8, shown


def test_a_secret_cut_by_a_progress_redraw_is_masked_in_an_uploaded_log():
    """A node log keeps a bar's "\r" redraws, which the console shows as lines of their own:
    a secret's start before one and its end after are masked as at a line break."""
    shown = Redactor.of([SAS]).body(f"cfg {SAS[:20]}\r{SAS[20:]} ok\r\nnext\n".encode())
    assert shown.decode() == f"cfg {REDACTED}\r{REDACTED} ok\r\nnext\n"


def test_ordinary_lines_beside_a_long_secret_are_left_whole():
    hide = Redactor.of([SAS, "mypassword-very-long-1234"])
    for line in [
        "step 1234 loss 2.3456 lr 0.0001 sv=2024",
        "    enter your password and continue",
        "sig=Ab",
        "2024-11-04 12:00:00 epoch 3 done",
        '{"path": "a\\/b", "rate": "50%25", \'q\': "\\u00e9"} \x1b[32mok\x1b[0m &amp;',
    ]:
        assert hide.text(line) == line


def test_a_string_repeated_through_a_record_is_redacted_wherever_it_is_as_text_redacts_it():
    """Redactor.data redacts each distinct string once (issue 41) and puts it back wherever it
    was: as a key, a value, in a list or a tuple, in another Redactor's data as that one hides
    it."""
    secret = "Zq9xSecretVal77LongerAbc"
    said = f"token={secret} at https://user:pw9Xq@host/x"
    record = {
        said: [said, (said, 3, None), {"node": said, said: 1.5}],
        "nodes": [{"name": f"node-{i}", "address": "10.0.0.1", "log": said} for i in range(3)],
    }
    for hide in (Redactor.of([secret]), Redactor()):
        shown = hide.text(said)
        assert shown != said
        assert hide.data(record) == {
            shown: [shown, (shown, 3, None), {"node": shown, shown: 1.5}],
            "nodes": [{"name": f"node-{i}", "address": "10.0.0.1", "log": shown} for i in range(3)],
        }


@pytest.mark.parametrize("cuts", [(20,), (12, 30), (9, 26, 44)])
def test_a_secret_wrapped_across_lines_inside_a_json_string_shows_no_piece_of_8_characters(cuts):
    """A JSON log line (structlog, a program's metrics file the upload sends) writes a wrapped
    config dump's line breaks as \\n: each piece at such a break is masked as at a real one."""
    import json

    pieces = [SAS[i:j] for i, j in zip([0, *cuts], [*cuts, len(SAS)], strict=True)]
    dump = "config = {'sas': '" + "\n    ".join(pieces) + "', 'lr': 0.1}"
    line = json.dumps({"event": dump, "level": "info"})
    shown = Redactor.of([SAS]).text(line)
    assert _shown_of(SAS, shown) < 8, shown


@pytest.mark.parametrize("dump", [json.dumps, repr], ids=["JSON", "repr"])
@pytest.mark.parametrize("width", [23, 40, 50, 60])
def test_a_secret_wrapped_in_its_json_or_repr_escapes_shows_no_piece_of_8_characters(dump, width):
    """A config dump wrapped at ``width`` columns holding a secret whose JSON or repr writes
    escapes (\\t, \\u00e9, \\ud83d\\ude00): each line redacted alone keeps no 8 characters in a
    row of the secret as written, as where the secret is written raw."""
    line = dump({"config": f"db = {{'password': '{TAB_AND_ACCENT}'}}"})
    written = dump(TAB_AND_ACCENT)[1:-1]
    assert written in line and written != TAB_AND_ACCENT  # escaped, in one piece
    hide = Redactor.of([TAB_AND_ACCENT])
    for piece in (line[i : i + width] for i in range(0, len(line), width)):
        shown = hide.text(piece)
        assert _shown_of(written, shown) < 8, (piece, shown)


SHORT = ["hunter2x", "Pw0-77!", "correct horse", "Zq9x/Secret~Val"]  # 6 to 15 characters


@pytest.mark.parametrize("value", SHORT)
@pytest.mark.parametrize("indent", ["", "    ", "\t"])
def test_a_short_secret_cut_by_a_line_break_is_masked_on_both_lines_at_every_cut(value, indent):
    """A program's output wrapped: line 1 ends with the value's first k characters, line 2
    starts with the rest, for every k (a space the value holds may be where it was broken);
    read together, as a record, a report or an upload reads a log, both parts are masked."""
    hide = Redactor.of([value])
    for k in range(1, len(value)):
        first, rest = value[:k].rstrip(), value[k:].lstrip()
        for brk in ("\n", "\r\n", "\r"):
            text = f"pw: {first}{brk}{indent}{rest} ok"
            assert hide.text(text) == f"pw: {REDACTED}{brk}{indent}{REDACTED} ok", text
        line = json.dumps({"event": f"cfg = {{'pw': '{first}\n{indent}{rest}'}}"})
        assert hide.text(line) == json.dumps(
            {"event": f"cfg = {{'pw': '{REDACTED}\n{indent}{REDACTED}'}}"}
        )


def test_a_short_secret_s_pieces_elsewhere_are_left_whole():
    """Only where both parts meet at a break: a line ending with a start of the value whose
    next line does not go on with the rest, and the rest at a line's start after another."""
    hide = Redactor.of(["hunter2x"])
    for text in ["the hunt\nis on", "go hunter\n2 steps", "x\nter2x marks", "hun\n\tx ter2x",
                 "step 1 loss 2.5\nstep 2 loss 2.4"]:  # fmt: skip
        assert hide.text(text) == text


def test_a_node_line_ending_with_a_secret_s_start_waits_for_the_next_on_the_console(monkeypatch):
    """The console reads a node's output a line at a time: a line whose end may begin a
    secret is held until that node's next line, so both parts are masked; another node's lines
    go on meanwhile; a held line is shown when the command ends."""
    import io

    from dtrun.cli import common
    from dtrun.cli.inert import inert_console_class

    monkeypatch.setattr(redact, "_process", Redactor.of(["hunter2x"]))
    monkeypatch.setattr(common, "HOLD_S", 60.0)  # shown by the next line, not by the clock
    out = io.StringIO()
    show = inert_console_class()(file=out)
    for node, line in [("node-0", "pw: hun"), ("node-1", "step 1"), ("node-0", "ter2x ok"),
                       ("node-0", "last: hu")]:  # fmt: skip
        common.print_node_line(show, node, line)
    assert out.getvalue() == (f"[node-1] step 1\n[node-0] pw: {REDACTED}\n[node-0] {REDACTED} ok\n")
    common.release_node_lines()
    assert out.getvalue().endswith("[node-0] last: hu\n")


@pytest.mark.parametrize("cut", [("pw: hu", "nt3", "rPw9 x"), ("pw: hu", "n", "t3r", "Pw9 x")])
def test_a_secret_cut_in_three_lines_or_more_is_masked_on_each_on_the_console(monkeypatch, cut):
    """A line that is wholly the next part of a value the held line starts is held with it:
    each part showed (`hu`, `nt3`, `rPw9`) where only two lines were read together."""
    import io

    from dtrun.cli import common
    from dtrun.cli.inert import inert_console_class

    monkeypatch.setattr(redact, "_process", Redactor.of(["hunt3rPw9"]))
    monkeypatch.setattr(common, "HOLD_S", 60.0)  # shown by the next line, not by the clock
    out = io.StringIO()
    show = inert_console_class()(file=out)
    for line in (*cut, "pw: hu", "n ok"):
        common.print_node_line(show, "node-0", line)
    middle = [f"[node-0] {REDACTED}\n"] * (len(cut) - 2)
    masked = [f"[node-0] pw: {REDACTED}\n", *middle, f"[node-0] {REDACTED} x\n"]
    assert out.getvalue() == "".join([*masked, "[node-0] pw: hu\n", "[node-0] n ok\n"])


def test_a_node_line_ending_with_one_character_of_a_secret_is_shown_and_the_rest_masked(
    monkeypatch,
):
    """One character is shown at once (a digit starts most values' hexadecimal: holding for it
    would hold most lines); the next line's rest of the value is masked all the same."""
    import io

    from dtrun.cli import common
    from dtrun.cli.inert import inert_console_class

    monkeypatch.setattr(redact, "_process", Redactor.of(["hunter2x"]))
    out = io.StringIO()
    show = inert_console_class()(file=out)
    common.print_node_line(show, "node-0", "pw: h")
    assert out.getvalue() == "[node-0] pw: h\n"
    common.print_node_line(show, "node-0", "unter2x ok")
    assert out.getvalue() == f"[node-0] pw: h\n[node-0] {REDACTED} ok\n"


def test_a_held_node_line_is_shown_when_due_and_the_next_line_s_part_still_masked(monkeypatch):
    import io

    from dtrun.cli import common
    from dtrun.cli.inert import inert_console_class

    monkeypatch.setattr(redact, "_process", Redactor.of(["hunter2x"]))
    monkeypatch.setattr(common, "HOLD_S", 0.0)
    out = io.StringIO()
    show = inert_console_class()(file=out)
    common.print_node_line(show, "node-0", "pw: hunt")
    deadline = time.monotonic() + 10  # a bound on a thread's start, not a timing assertion
    while "pw: hunt" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)
    common.print_node_line(show, "node-0", "er2x ok")
    assert out.getvalue() == f"[node-0] pw: hunt\n[node-0] {REDACTED} ok\n"


@pytest.mark.parametrize("shape", SHAPES, ids=[shape.name for shape in SHAPES])
def test_every_shape_cut_by_a_line_break_is_masked_on_both_lines(shape):
    """The table's secrets up to 64 characters (a PEM key's lines are values of their own),
    printed wrapped at every cut and read with both lines."""
    value = shape.secret.splitlines()[1] if "\n" in shape.secret else shape.secret
    for k in range(1, min(len(value), 64)):
        printed = f"got {value[:k]}\n  {value[k:]} ok"
        assert HIDE.text(printed) == f"got {REDACTED}\n  {REDACTED} ok", printed

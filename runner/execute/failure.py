"""Why a node failed, from its log: the failing rank's own error, then the launcher's summary.

A node log holds the program's output and its launcher's, interleaved. The launchers end it with
their own account of the failure (torchrun's ChildFailedError traceback and summary, mpirun's
dashed notices, DeepSpeed's "exits with return code" line), which a plain tail of the log shows
instead of the program's traceback a few lines up. ``read_failure`` separates the two; it is
pure, and tested on logs recorded from the real launchers (tests/data/failures/).

Lines may carry a prefix saying which process wrote them: torchrun's ``[rank1]:`` or
``[default1]:`` (--tee), mpirun's ``[1,1]<stderr>:`` (--tag-output), horovodrun's
``[1]<stderr>:``, pdsh's ``127.0.0.3: ``. A traceback is read from one prefix's lines only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dtrun.errors import describe_exit, indent
from dtrun.redact import pem_lines, redact_cuts, redact_text

TAIL_LINES = 20  # lines of a log quoted when nothing in it is recognised
ERROR_LINES = 12  # at most, of the failing rank's traceback: its last frames and exception
OUTPUT_LINES = 5  # at most, of a rank's last output when it left no traceback
SUMMARY_LINES = 8  # at most, of the launcher's summary
LINE_CHARS = 240  # longer lines are cut

TRACEBACK = "Traceback (most recent call last):"
_TAG = re.compile(r"\[\d+,(?P<mpi>\d+)\]<std(?:out|err|diag)>:|\[(?P<hvd>\d+)\]<std(?:out|err)>:")
_RANK = re.compile(r"\[(?P<kind>rank|default)(?P<n>\d+)\]:")
# pdsh names the host before each line; found from lines no program writes on its own.
_HOST = re.compile(
    r"(?P<host>[\w.-]+): (?=Traceback \(most recent call last\):|\[\d{4}-\d\d-\d\d )"
)
_DEEPSPEED_RECORD = re.compile(r"\[\d{4}-\d\d-\d\d [\d:,]+\] \[\w+\] \[(?P<file>[\w.]+):\d+:\w+\] ")
# DeepSpeed's launcher's files; real_accelerator.py warns in every process that imports it.
_DEEPSPEED_LAUNCHER = ("launch.py", "runner.py", "multinode_runner.py", "real_accelerator.py")
_GLOG = re.compile(r"[IWEF]\d{4} [\d:.]+ +\d+ (?P<file>\S+):\d+\] ")
# A log record: Python logging's default "INFO:root:..." or one that starts with a timestamp.
_RECORD = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)[:\] ]|\[?\d{4}-\d\d-\d\d[ T]")
_OMPI_LOG = re.compile(r"\[[\w.-]+:\d+\] ")  # OpenMPI's own warnings: [host:pid] plm:rsh: ...
_LAUNCHER_FRAME = re.compile(
    r'File "[^"]*(?:/bin/(?:torchrun|deepspeed|horovodrun)|torch/distributed/(?:run|launch)\.py'
    r"|deepspeed/launcher/|horovod/runner/)"
)
_TORCHRUN_FIELD = re.compile(r"  (time|host|rank|exitcode|error_file|traceback)\s*: ?(.*)")
_MPI_SIGNAL = re.compile(r"process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)")
_RULE = re.compile(r"(?:={20,}|-{20,})")
# Output after a traceback worth showing: the traceback may have been handled, and the rank died
# of what came later (a C++ exception's "terminate called ... what():", an NCCL watchdog, exit).
_SAYS_ERROR = re.compile(r"error|fatal|abort|terminate|what\(\)|fault|killed|exception", re.I)
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


@dataclass(frozen=True)
class Failure:
    """What a failed node's log says; empty fields where it does not say."""

    rank: str | None = None  # the failing rank
    local_rank: str | None = None
    host: str | None = None  # where it ran, when the log names hosts (pdsh)
    exit: str | None = None  # "exit code 3", "signal SIGKILL": the rank's own, not the node's
    error: tuple[str, ...] = ()  # its traceback, shortened
    later: tuple[str, ...] = ()  # error lines it wrote after the traceback (a C++ abort)
    output: tuple[str, ...] = ()  # its last lines of output, when it left no traceback
    summary: tuple[str, ...] = ()  # the launcher's own account, shortened

    @property
    def found(self) -> bool:
        return bool(self.error or self.summary or self.rank or self.local_rank or self.exit)

    def who(self) -> str:
        """``rank 1 (local rank 0) on 127.0.0.3 exited with exit code 3``, or ``""``."""
        who = f"rank {self.rank}" if self.rank is not None else ""
        if self.local_rank is not None:
            who = (
                f"{who} (local rank {self.local_rank})" if who else f"local rank {self.local_rank}"
            )
        if self.host:
            who = f"{who or 'a rank'} on {self.host}"
        if not who:
            return f"a rank exited with {self.exit}" if self.exit else ""
        return f"{who} exited with {self.exit}" if self.exit else f"{who} failed"


@dataclass(frozen=True)
class _Line:
    source: str  # the prefix that says which process wrote it; "" when none
    text: str


@dataclass(frozen=True)
class _Traceback:
    source: str
    frames: tuple[str, ...]  # the lines between "Traceback ..." and the exception
    exception: tuple[str, ...]  # the exception line and the lines that continue its message
    end: int  # index of its last line

    @property
    def launcher(self) -> bool:
        return "ChildFailedError" in self.exception[0] or any(
            _LAUNCHER_FRAME.search(frame) for frame in self.frames
        )

    def shortened(self) -> tuple[str, ...]:
        """The header, the last frames that fit in ERROR_LINES, the exception."""
        frames = [f for f in self.frames if f.strip().strip("^~ ")]  # no 3.11 caret lines
        room = ERROR_LINES - 1 - len(self.exception)
        starts = [i for i, frame in enumerate(frames) if frame.lstrip().startswith("File ")]
        cut = next((s for s in starts if len(frames) - s <= room - 1), starts[-1] if starts else 0)
        kept = frames[cut:]
        dropped = ("  ...",) if cut > 0 else ()
        return (TRACEBACK, *dropped, *kept, *self.exception)


def explain_log(path: Path) -> str:
    """The reason a failed node's error gives, from its log (``""`` when it is empty)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return explain(pem_lines(redact_cuts(text)))  # a key printed line by line; a cut secret


def explain(text: str) -> str:
    """The failing rank and its error, then the launcher's summary; or, when the log holds
    neither, its last lines."""
    if not text.strip():
        return ""
    failure = read_failure(text)
    if not failure.found:
        lines = [_cut(line) for line in text.splitlines()[-TAIL_LINES:]]
        return "the last lines of its log:\n" + indent("\n".join(lines))
    who = failure.who()
    parts = []
    if failure.error:
        parts.append(f"{who}; its error:" if who else "the failing rank's error:")
        parts.append(indent("\n".join(failure.error)))
        if failure.later:  # the traceback was not the end: it may have been handled
            parts.append("  and after it:")
            parts.append(indent("\n".join(failure.later)))
    elif failure.output:
        parts.append(f"{who}; its last output:" if who else "the last output:")
        parts.append(indent("\n".join(failure.output)))
    elif who:
        parts.append(who)
    if failure.summary:
        parts.append("  the launcher's summary:")
        parts.append(indent("\n".join(failure.summary)))
    return "\n".join(parts)


def read_failure(text: str) -> Failure:
    lines = _split(text.splitlines())
    used: set[int] = set()
    facts: dict[str, str] = {}
    summary: list[str] = []
    tracebacks: list[_Traceback] = []
    root_cause: _Traceback | None = None
    for i, line in enumerate(lines):
        if i in used:
            continue
        if line.text.startswith(TRACEBACK):
            tb = _read_traceback(lines, i, used)
            if not tb.launcher:
                tracebacks.append(tb)
            elif "ChildFailedError" in tb.exception[0]:
                summary.append(tb.exception[0].strip())
                root_cause = _read_torchrun_summary(lines, tb.end + 1, used, facts, summary)
            else:  # the launcher failed on its own (a rendezvous it could not join)
                summary.extend(tb.shortened()[-3:])
        elif _RULE.fullmatch(line.text.strip()) and not line.source:
            _read_mpirun_notice(lines, i, used, facts, summary)
        else:
            _read_launcher_line(line, facts, summary, used, i)
    program = [(i, line) for i, line in enumerate(lines) if i not in used and line.text.strip()]
    return _failure(facts, summary, tracebacks, root_cause, program)


def _failure(
    facts: dict[str, str],
    summary: list[str],
    tracebacks: list[_Traceback],
    root_cause: _Traceback | None,
    program: list[tuple[int, _Line]],
) -> Failure:
    mine = [tb for tb in tracebacks if _is_failing(tb.source, facts)]
    chosen = (mine or tracebacks)[-1] if tracebacks else root_cause
    error = chosen.shortened() if chosen else ()
    later: list[str] = []
    if chosen in tracebacks:
        later = [
            line.text
            for i, line in program
            if i > chosen.end and line.source == chosen.source and _SAYS_ERROR.search(line.text)
        ]
    output: tuple[str, ...] = ()
    if not error:
        lines = [line for _, line in program]
        own = [line for line in lines if _is_failing(line.source, facts)] or lines
        output = tuple(line.text for line in own[-OUTPUT_LINES:])
    return Failure(
        rank=facts.get("rank"),
        local_rank=facts.get("local_rank"),
        host=facts.get("host"),
        exit=facts.get("exit"),
        error=tuple(_cut(line) for line in error),
        later=tuple(_cut(line) for line in later[-OUTPUT_LINES:]),
        output=tuple(_cut(line) for line in output),
        summary=tuple(_cut(line) for line in summary[-SUMMARY_LINES:]),
    )


def _split(raw: list[str]) -> list[_Line]:
    """Each line with its prefix apart (mpirun repeats its tag inside a line: removed too)."""
    hosts = {m["host"] for line in raw if (m := _HOST.match(line))}
    lines = []
    for line in raw:
        match = _TAG.match(line) or _RANK.match(line)
        if match:
            source = match.group(0)
            lines.append(_Line(source, line[len(source) :].replace(source, "")))
            continue
        host = line.split(": ", 1)[0]
        if host in hosts:
            lines.append(_Line(host + ": ", line[len(host) + 2 :]))
        else:
            lines.append(_Line("", line))
    return lines


def _read_traceback(lines: list[_Line], start: int, used: set[int]) -> _Traceback:
    """A traceback from ``start``: the same source's lines, other processes' lines skipped."""
    source = lines[start].source
    used.add(start)
    frames: list[str] = []
    exception: list[str] = []
    end = start
    for i, line in _same_source(lines, start + 1, source):
        text = line.text
        if not exception:
            if not text.strip():
                break
            used.add(i)
            end = i
            (frames if text[:1].isspace() else exception).append(text)
        elif len(exception) <= 4 and _continues(text):  # a message of several lines
            used.add(i)
            end = i
            exception.append(text)
        else:
            break
    return _Traceback(source, tuple(frames), tuple(exception) or ("(no exception line)",), end)


def _same_source(lines: list[_Line], start: int, source: str) -> Iterator[tuple[int, _Line]]:
    for i in range(start, len(lines)):
        if lines[i].source == source:
            yield i, lines[i]


def _continues(text: str) -> bool:
    """Whether a line after an exception line still belongs to its message: it does not start
    something else (a traceback, a rule, a log record, a C++ abort)."""
    return bool(
        text.strip()
        and not text.startswith((TRACEBACK, "terminate called", *_CHAINED))
        and not _RULE.fullmatch(text.strip())
        and not _RECORD.match(text)
        and not _DEEPSPEED_RECORD.match(text)
        and not _GLOG.match(text)
    )


def _read_torchrun_summary(
    lines: list[_Line], start: int, used: set[int], facts: dict[str, str], summary: list[str]
) -> _Traceback | None:
    """torchrun's ===== block after ChildFailedError: what failed, other failures, root cause.

    Returns the root cause's traceback when torchrun has one (the program used @record).
    """
    if start >= len(lines) or not lines[start].text.startswith("====="):
        return None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].text.startswith("=====")), -1)
    block = lines[start + 1 : end] if end > 0 else lines[start + 1 :]
    used.update(range(start, end + 1 if end > 0 else len(lines)))
    section = field = ""
    traceback: list[str] = []
    for text in (line.text.rstrip() for line in block):
        if match := _TORCHRUN_FIELD.match(text):
            field, value = match.groups()
            if _torchrun_field(section, field, value, facts):
                if section not in summary:
                    summary.append(section)  # "Failures:" only when there are some to show
                summary.append(text)
            if field == "traceback" and value.startswith(TRACEBACK) and _root_cause(section):
                traceback = [TRACEBACK]
        elif field == "traceback" and traceback:
            traceback.append(text[2:])
        elif text.startswith(("Root Cause", "Failures")):
            section = text
        elif text.endswith(" FAILED"):
            summary.append(text)
    return _as_traceback(traceback) if traceback else None


def _as_traceback(lines: list[str]) -> _Traceback:
    frames = tuple(line for line in lines[1:] if line[:1].isspace())
    exception = tuple(line for line in lines[1:] if line.strip() and not line[:1].isspace())
    return _Traceback("", frames, exception or ("(no exception line)",), -1)


def _root_cause(section: str) -> bool:
    return section.startswith("Root Cause")


def _torchrun_field(section: str, field: str, value: str, facts: dict[str, str]) -> bool:
    """Note what a root cause's field says; whether the summary shows the field."""
    if _root_cause(section):
        if field == "rank" and (match := re.match(r"(-?\d+) \(local_rank: (\d+)\)", value)):
            facts["rank"], facts["local_rank"] = match.groups()
        elif field == "exitcode" and (match := re.match(r"(-?\d+)", value)):
            facts["exit"] = describe_exit(int(match.group(1)))
    if field == "error_file":
        return value != "<N/A>"
    if field == "traceback":  # shown when it is one line: "Signal 9 (SIGKILL) received by PID 1"
        return not value.startswith(("To enable traceback", TRACEBACK))
    return field in ("rank", "exitcode")


def _read_mpirun_notice(
    lines: list[_Line], start: int, used: set[int], facts: dict[str, str], summary: list[str]
) -> None:
    """An OpenMPI notice between dashed rules, when it is one (a program may draw rules too)."""
    rule = lines[start].text.strip()
    for end in range(start + 1, min(start + 40, len(lines))):
        if lines[end].text.strip() == rule and not lines[end].source:
            break
    else:
        return
    body = [line.text.strip() for line in lines[start + 1 : end] if line.text.strip()]
    if not re.search(r"mpirun|MPI|ORTE|PRTE|Primary job|process", " ".join(body)):
        return
    used.update(range(start, end + 1))
    summary.extend(body)
    for text in body:
        if match := re.match(r"Process name: \[\[\d+,\d+\],(\d+)\]", text):
            facts["rank"] = match.group(1)
        elif match := re.match(r"Exit code:\s+(-?\d+)", text):
            facts["exit"] = describe_exit(int(match.group(1)))
        elif match := _MPI_SIGNAL.search(text):
            facts["rank"], facts["host"] = match.group(1), match.group(2)
            facts["exit"] = describe_exit(-int(match.group(3)))


def _read_launcher_line(
    line: _Line, facts: dict[str, str], summary: list[str], used: set[int], i: int
) -> None:
    """The launchers' one-line logs: noise, except where they say which rank failed."""
    text = line.text
    if record := _DEEPSPEED_RECORD.match(text):
        if record["file"] not in _DEEPSPEED_LAUNCHER:
            return  # the program's own DeepSpeed logs
        used.add(i)
        message = text[record.end() :]
        if match := re.search(r"exits with return code = (-?\d+)", message):
            summary.append(line.source + message)
            if "exit" in facts:
                return  # the first rank to fail is the one named; the others were stopped
            facts["exit"] = describe_exit(int(match.group(1)))
            if rank := re.search(r"--local_rank=(\d+)", message):
                facts["local_rank"] = rank.group(1)
            if line.source:
                facts["host"] = line.source.rstrip(": ")
    elif (glog := _GLOG.match(text)) and glog["file"].startswith("torch/distributed/elastic/"):
        used.add(i)  # torchrun's agent: its failure is in its summary
    elif text.startswith("pdsh@"):
        used.add(i)
        summary.append(text)
    elif _OMPI_LOG.match(text) and not line.source:
        used.add(i)


def _is_failing(source: str, facts: dict[str, str]) -> bool:
    """Whether lines with this prefix came from the failing rank, as far as the prefix says."""
    if not source:
        return False
    if match := _TAG.fullmatch(source):
        return (match["mpi"] or match["hvd"]) == facts.get("rank")
    if match := _RANK.fullmatch(source):
        key = "rank" if match["kind"] == "rank" else "local_rank"
        return match["n"] == facts.get(key)
    return source.rstrip(": ") == facts.get("host")


def _cut(line: str) -> str:  # a long line's secrets masked first: a cut would keep a start
    line = line.rstrip() if len(line) <= LINE_CHARS else redact_text(line.rstrip())
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"

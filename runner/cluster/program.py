"""Before a launch: the user's program is where the nodes will look for it.

`dtrun run -- python nosuch.py` used to start every launcher, which printed 40 to 120 lines of
its own traceback per node before failing. The program's file is now looked for on every node
of the launch (docs/launchers.md "Your program"): a script must be a readable regular file, an
executable given by its path an executable regular file, and one given by its bare name must
be found in the node's PATH. A module (`python -m`) is left to the launcher: where Python finds
it depends on the launch's own PYTHONPATH.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dtrun.errors import UsageError
from dtrun.execute import LOGIN_SCRIPT_FIX, Answer
from dtrun.render import render
from dtrun.spec.cluster import Node
from dtrun.spec.request import Program, ProgramKind
from dtrun.spec.text import one_line

Command = Callable[[dict[str, str]], dict[str, Answer]]

_SAID = {
    "missing": "does not exist",
    "not-file": "is not a regular file",
    "not-readable": "cannot be read",
    "not-executable": "is not executable",
    "not-in-path": "is not found in its PATH",
}


_UNANSWERED = "could not be checked: the check "


def _problem(answer: Answer) -> str | None:
    """What is wrong with the program on a node that answered, by its check's last word."""
    _, said, after = answer.output.rpartition("dtrun-program ")
    words = after.split() if said else []
    if not words:
        return _unanswered(answer)
    state = one_line(words[0])
    return None if state == "ok" else _SAID.get(state, f"could not be checked ({state})")


def _unanswered(answer: Answer) -> str:
    """A node whose check ended before it said a word of the program: a login script that
    exits, or sets -e and fails, ends every command there first. Its exit code and last line
    say why, control characters escaped."""
    ended = "was stopped" if answer.exit_code is None else f"exited {answer.exit_code}"
    last = answer.output.strip().splitlines()[-1:]
    line = f", its last line: {one_line(last[0])}" if last else ", saying nothing"
    return f"{_UNANSWERED}{ended} before answering{line}"


def program_script(program: Program) -> str | None:
    """The check for ``program`` as a bash script, or None where nothing is checked."""
    if program.kind is ProgramKind.MODULE:
        return None
    executable = program.kind is ProgramKind.EXECUTABLE
    bare = executable and "/" not in program.target
    return render(
        "remote/program-check.sh.j2",
        {"target": program.target, "bare": bare, "executable": executable},
    )


def check_program(command: Command, program: Program, nodes: Sequence[Node]) -> frozenset[str]:
    """Exit 2 naming each node where ``program`` is not there to run; nothing is started. A
    node that does not answer is left to the readiness step. Returns the names of the nodes
    that answered (none where nothing was checked): the readiness step need not ask them
    again (runner/engines/base.py, wait_for_nodes)."""
    script = program_script(program)
    if script is None or not nodes:
        return frozenset()
    answers = command({node.name: script for node in nodes})
    found: list[tuple[str, str]] = []  # (node, what is wrong there)
    answered: set[str] = set()
    for node in nodes:
        answer = answers.get(node.name, Answer(error="no answer"))
        if answer.error is not None:
            continue  # unreachable: the readiness step waits for it, then says so
        answered.add(node.name)
        problem = _problem(answer)
        if problem is not None:
            found.append((node.name, problem))
    if not found:
        return frozenset(answered)
    by_said: dict[str, list[str]] = {}
    for name, problem in found:
        by_said.setdefault(problem, []).append(name)
    where = "; ".join(f"on {' and '.join(names)} it {said}" for said, names in by_said.items())
    what = "script" if program.kind is ProgramKind.SCRIPT else "program"
    if any(said.startswith(_UNANSWERED) for said in by_said):
        fix = LOGIN_SCRIPT_FIX
    elif set(by_said) == {_SAID["not-executable"]}:
        fix = f"make it executable on every node (chmod +x {program.target}), or run it with its "
        fix += "interpreter (bash SCRIPT, python SCRIPT)"
    elif program.kind is ProgramKind.EXECUTABLE and "/" not in program.target:
        fix = "install it on every node, or give its full path"
    else:
        fix = "put it at that path on every node (shared storage, or a copy on each), or give "
        fix += "the right path"
    raise UsageError(
        f"the {what} {program.target} cannot be run: {where}",
        why="every process of the launch runs it on its own node; nothing was started",
        fix=fix,
    )

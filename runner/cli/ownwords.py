"""Secret values that are also names dtrun writes in its records: refused, or not looked for.

A secret is masked wherever it appears (runner/redact/): one that is, or lies inside, a node's
name or address, a record's key or one of the values dtrun records (``running``, ``status``,
``node-0``) would mask dtrun's own records (run.json's ``nodes[].node``, ``log_path``), leave
them unreadable by `dtrun report`, and the masks' places would give the secret away. Such a
value given to the command (an --env value, a secret in the program's arguments) is refused
before anything starts (exit 2); one of this machine's variables, which dtrun cannot refuse, is
no longer looked for (as a value too short to look for). The words are derived from the code: the
keys and choices of the record shapes `dtrun report` reads (runner/report/recorded.py), the
fields of the results run.json and runs.json hold (runner/spec/outcome.py), and every choice
of dtrun's enums.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Mapping
from functools import cache

from dtrun.errors import PlanError
from dtrun.redact import is_secret_name, spare_secrets, worth_looking_for
from dtrun.spec.cluster import Inventory
from dtrun.spec.request import LaunchRequest


def _shape_words(shape: object, seen: set[int]) -> Iterable[str]:
    """The keys and choices a record shape names: an ``obj``'s keys, a ``one_of``'s choices,
    and those of the shapes inside (runner/record/readback.py builds each as a closure)."""
    if isinstance(shape, str):
        yield shape
        return
    if id(shape) in seen:
        return
    seen.add(id(shape))
    if isinstance(shape, Mapping):
        inside: Iterable[object] = [*shape, *shape.values()]
    elif isinstance(shape, tuple | list | frozenset | set):
        inside = shape
    elif callable(shape):
        inside = [_contents(cell) for cell in getattr(shape, "__closure__", None) or ()]
    else:
        return
    for item in inside:
        yield from _shape_words(item, seen)


def _contents(cell: object) -> object:
    """A closure cell's value: a shape's fields or choices, or a shape inside (a text held
    there, a message, is no name: left out)."""
    try:
        inside = cell.cell_contents  # type: ignore[attr-defined]
    except ValueError:  # a cell not yet filled
        return None
    return None if isinstance(inside, str) else inside


def _enum_choices(kind: type[enum.Enum]) -> Iterable[str]:
    for sub in kind.__subclasses__():
        if sub.__module__.startswith("dtrun."):
            yield from (str(member.value) for member in sub)
        yield from _enum_choices(sub)


@cache
def record_words() -> frozenset[str]:
    """Every key and recorded choice dtrun's records hold, derived from the code."""
    # the modules whose enums check.json records, loaded: the walk sees loaded enums only
    from dtrun.check import model as _check_model  # noqa: F401
    from dtrun.check import stopped as _check_stopped  # noqa: F401
    from dtrun.report import recorded
    from dtrun.spec import outcome

    seen: set[int] = set()
    words: set[str] = set()
    for name, value in vars(recorded).items():
        if not name.startswith("__") and (isinstance(value, Mapping) or _is_shape(value)):
            words.update(_shape_words(value, seen))
    for value in vars(outcome).values():
        if isinstance(value, type) and dataclasses.is_dataclass(value):
            words.update(field.name for field in dataclasses.fields(value))
    words.update(_enum_choices(enum.Enum))
    return frozenset(words)


def _is_shape(value: object) -> bool:
    return callable(value) and getattr(value, "__module__", "") == "dtrun.record.readback"


def _named(inventory: Inventory | None) -> list[tuple[str, Callable[[], Iterable[str]]]]:
    """What a secret must not lie inside: the records' words, or the inventory's names."""
    if inventory is None:
        return [("a key or value of its records", record_words)]
    return [
        ("a node's name", lambda: (node.name for node in inventory.nodes)),
        ("a node's address", lambda: (node.address for node in inventory.nodes)),
    ]


def _given(spec: LaunchRequest) -> Iterable[tuple[str, str]]:
    """The secrets the command was given, each with what it is: an --env value under a secret
    name, a secret in the program's arguments; those masked as free text alone (a short one is
    masked only as NAME=VALUE, docs/security.md)."""
    for name, value in spec.env:
        if is_secret_name(name) and worth_looking_for(value):
            yield f"the value of {name}", value
    program = getattr(spec, "program", None)
    for value in program.secrets() if program is not None else ():
        if worth_looking_for(value):
            yield "a secret in the program's arguments", value


def refuse_own_words(spec: LaunchRequest, inventory: Inventory | None = None) -> None:
    """Refuse a secret the command was given that is, or lies inside, a name dtrun writes: a
    record's key or recorded choice, or (``inventory``) a node's name or address. The same
    values this machine's variables hold are no longer looked for (``spare_own_words``)."""
    for what, words in _named(inventory):
        names = set(words())
        for given, value in _given(spec):
            if any(value in word for word in names):
                how = "is also" if value in names else "lies inside"
                raise PlanError(
                    f"{given} {how} a name dtrun writes in its records ({what})",
                    why="a secret is masked wherever it appears, so dtrun's own records would "
                    "be masked: `dtrun report` could not read them, and the masks would show "
                    "where the secret stands",
                    fix="give it its real secret value, or a test value dtrun does not write",
                )
    spare_own_words(inventory)


def spare_own_words(inventory: Inventory | None = None) -> None:
    """Stop looking for a remembered secret that lies inside a name dtrun writes: one of this
    machine's variables (MY_API_KEY=launches), which dtrun cannot refuse and a launch does not
    need, is then masked nowhere, as a value too short to look for is not."""
    names = [word for _, words in _named(inventory) for word in words()]
    spare_secrets(lambda value: any(value in word for word in names))


def kept_secrets(values: Iterable[str], inventory: Inventory | None = None) -> list[str]:
    """``values`` less those no longer looked for (``spare_own_words``) that lie inside a
    record's names, or (``inventory``) a node's name or address: the secrets an uploaded copy
    of the run is redacted of."""
    names = [word for _, words in _named(inventory) for word in words()]
    return [value for value in values if not any(value in word for word in names)]

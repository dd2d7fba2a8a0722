"""Option groups: a frozen dataclass of typer options that several commands share, spread into
each command's signature by ``grouped`` and handed back to the command as one value.

    @grouped
    def bench(where: Where, launching: Launching, json_out: opts.Json = False) -> None: ...

typer sees every field of ``Where`` and ``Launching`` as an option of its own (their help,
panels and defaults come from the fields' Annotated types); the command gets two objects.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., None])


@functools.cache  # a group serves several commands; its hints are evaluated once
def _fields(group: type) -> tuple[inspect.Parameter, ...]:
    hints = typing.get_type_hints(group, include_extras=True)
    params = []
    for field in dataclasses.fields(group):
        default = (
            field.default_factory()
            if field.default is dataclasses.MISSING
            and field.default_factory is not dataclasses.MISSING
            else field.default
        )
        params.append(
            inspect.Parameter(
                field.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=default,
                annotation=hints[field.name],
            )
        )
    return tuple(params)


def grouped(command: F) -> F:
    """The command, with each parameter typed by an option group replaced by the group's fields."""
    hints = typing.get_type_hints(command, include_extras=True)
    params: list[inspect.Parameter] = []
    groups: dict[str, type] = {}
    for name, param in inspect.signature(command).parameters.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            groups[name] = hint
            params.extend(_fields(hint))
        else:
            params.append(param.replace(annotation=hint, kind=inspect.Parameter.KEYWORD_ONLY))
    names = [param.name for param in params]
    if len(set(names)) != len(names):
        raise TypeError(f"{command.__name__}: two option groups share a field name")

    @functools.wraps(command)
    def call(**options: Any) -> None:
        for name, group in groups.items():
            fields = [field.name for field in dataclasses.fields(group)]
            options[name] = group(**{field: options.pop(field) for field in fields})
        try:
            command(**options)
        finally:  # a node's last line held to mask a secret it may begin (docs/security.md)
            from dtrun.cli.common import release_node_lines

            release_node_lines()

    del call.__wrapped__  # typer reads __signature__ and __annotations__, not the command's
    call.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    call.__annotations__ = {param.name: param.annotation for param in params}
    return typing.cast(F, call)


S = TypeVar("S")


def by_name(group: Any, spec: type[Any], **named: str) -> dict[str, Any]:
    """The values of ``group``'s fields for the fields of ``spec`` of the same name, or of the
    group field ``named`` gives for a spec field (spec field="group_field")."""
    have = {field.name for field in dataclasses.fields(group)}
    return {
        field.name: getattr(group, named.get(field.name, field.name))
        for field in dataclasses.fields(spec)
        if named.get(field.name, field.name) in have
    }


def spec_from(group: Any, spec: type[S], **named: str) -> S:
    """``spec`` built from ``group`` by field name (``by_name``): an option added to the group
    under its spec field's name reaches the spec with no other line changed."""
    return spec(**by_name(group, spec, **named))

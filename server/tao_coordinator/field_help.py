"""Pydantic models on the command line: a flag's help and default from the field it sets (its attribute docstring
and default, so the flag says what the configuration says and cannot drift from it), and a validation error as one
line naming each bad field.

Only pydantic is imported here: `tao COMMAND --help` builds its parser from this without loading what the command
runs (`tests/test_cli_imports.py`).
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, ValidationError


def field_help(model: type[BaseModel], name: str, *, default: str | None = None) -> str:
    """The field's docstring on one line, then its default in parentheses unless the docstring already says it
    (`default` replaces the model's, for one computed elsewhere). A `%` is escaped for argparse."""
    field = model.model_fields[name]
    doc = " ".join((field.description or "").split())
    if not doc:
        raise ValueError(f"{model.__name__}.{name} has no docstring to use as help")
    if "default" not in doc.lower() or default is not None:
        shown = default if default is not None else _shown(field_default(model, name))
        doc = f"{doc} (default: {shown})"
    return doc.replace("%", "%%")


def field_default(model: type[BaseModel], name: str) -> Any:
    """The field's default, for a flag whose default is the model's."""
    return model.model_fields[name].get_default(call_default_factory=True)


def field_choices(model: type[BaseModel], name: str) -> list[str]:
    """The accepted values of a `Literal[...]` field, in their declared order."""
    return [str(value) for value in typing.get_args(model.model_fields[name].annotation)]


def problems(error: ValidationError) -> str:
    """Every problem of `error` as `field.path: message`, on one line."""
    return "; ".join(
        f"{'.'.join(str(part) for part in issue['loc']) or 'config'}: {issue['msg']}" for issue in error.errors()
    )


def _shown(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    if value == "":
        return '""'
    return str(value)

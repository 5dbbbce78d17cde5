"""Typer's parameter coercion, without pydantic where the answer is certain.

typer (0.29) turns every parameter's value into its annotated type through a pydantic
TypeAdapter, built the first time the parameter gets a value (even ``None``); importing
pydantic (and its plugin loader's importlib.metadata) is most of a short command's start-up.
``plain_coercion(params)`` gives each parameter a coercion that answers by itself where it
gives exactly typer's answer -- no value; a str for a ``str`` parameter; plain digits within the
bounds for an ``int``; a member of an Enum parameter's Enum (a default), or the member a string
names (typer's own choice matching, ``coerce_cli_choice``, which its adapter calls); a value its
``parser`` accepts -- and hands everything else, and every
value typer would refuse (so the messages stay typer's), to typer's own coercion.
tests/cli/test_startup.py compares the two on every parameter of every command.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any

try:  # typer's own choice matching, which its adapter for an Enum (or Literal) parameter calls
    from typer._param_types import choice_coercion_annotation, coerce_cli_choice
except ImportError:  # pragma: no cover - another typer: its own coercion answers
    choice_coercion_annotation = coerce_cli_choice = None

_PLAIN_INT = re.compile(r"-?[0-9]{1,18}")
_TYPER = object()  # _plain's "ask typer"


def plain_coercion(params) -> None:
    """Give every typer parameter in ``params`` the coercion below (idempotent; a parameter typer
    did not make, or a typer whose parameters work differently, is left alone)."""
    for param in params:
        if (hasattr(param, "get_runtime_param") and hasattr(param, "type_descriptor")
                and getattr(param, "_runtime_param", _TYPER) is None):
            param._runtime_param = PlainFirst()


class PlainFirst:
    """A parameter's coercion (typer's RuntimeParam protocol): plain values here, the rest by typer."""

    def __init__(self) -> None:
        self._typer = None

    def coerce(self, value: Any, param, ctx) -> Any:
        multiple = param.multiple or param.nargs == -1
        if value is None:  # typer's RuntimeParam.coerce, before it looks at the type
            return () if multiple else None
        descriptor = param.type_descriptor
        if multiple and descriptor.annotation == list[str] and type(value) in (tuple, list) \
                and getattr(descriptor.parameter_info, "parser", None) is None and all(type(v) is str for v in value):
            return list(value)  # typer: a list of the strings (append's DATA)
        if not multiple and descriptor.file_annotation is None:
            if descriptor.annotation in (int, float) and type(value) is str \
                    and getattr(descriptor.parameter_info, "parser", None) is None:
                return number(value, descriptor.annotation, descriptor.parameter_info)
            plain = _plain(value, descriptor.annotation, descriptor.parameter_info, ctx)
            if plain is not _TYPER:
                return plain
        return self.typer(param).coerce(value, param=param, ctx=ctx)

    def typer(self, param):
        """typer's own coercion of ``param`` (built once)."""
        if self._typer is None:
            from typer._coercion import build_runtime_param

            self._typer = build_runtime_param(param.type_descriptor)
        return self._typer


# The largest integer an option takes when it declares no maximum: offsets, ids and counts are
# 64-bit signed in the formats (FORMATS.md) and in AutoMQ; a larger value is a usage error.
INT_MAX = (1 << 63) - 1


def number(value: str, kind: type, info) -> int | float:
    """An int or float option's value, checked against its bounds (an int's default maximum is
    INT_MAX, a float must be finite); a bad value is one usage line in walctl's words, never
    the parser's ("Input should be a valid integer")."""
    import math

    low, high = getattr(info, "min", None), getattr(info, "max", None)
    if kind is int and high is None:
        high = INT_MAX
    word = "an integer" if kind is int else "a number"
    text = str if kind is int else "{:g}".format
    if low is not None:
        hint = f"{word} from {text(low)}" + (f" to {text(high)}" if high is not None else " or more")
    else:
        hint = f"{word} up to {text(high)}" if high is not None else f"{word}, finite"
    try:
        n = kind(value.strip())
    except ValueError:
        raise OptionError(f"{value!r} is not {word}", hint) from None
    if kind is float and not math.isfinite(n):
        raise OptionError(f"{value!r} is not a finite number", hint)
    if low is not None and n < low:
        raise OptionError(f"{value!r} is below the minimum {text(low)}", hint)
    if high is not None and n > high:
        raise OptionError(f"{value!r} is above the maximum {text(high)}", hint)
    return n


def OptionError(message: str, hint: str):  # noqa: N802 - walctl.options', loaded only for a bad value
    from walctl.options import OptionError as error

    return error(message, hint)


def _plain(value: Any, annotation: Any, info, ctx=None) -> Any:
    """What typer's adapter makes of ``value``, or _TYPER when only typer can say."""
    parser = getattr(info, "parser", None)
    if parser is not None:  # typer: Annotated[Any, BeforeValidator(parser)]
        try:
            return parser(value)
        except Exception:  # typer calls it again and words the error
            return _TYPER
    if type(value) is int and annotation is int:  # an int option's default (append's --iodepth)
        return _int_default(value, info)
    if isinstance(value, Enum):  # typer's choice: one of the Enum's own members is itself
        if isinstance(annotation, type) and issubclass(annotation, Enum) and any(value is m for m in annotation):
            return value
        return _TYPER
    if type(value) is not str:
        return _TYPER
    choices = choice_coercion_annotation(annotation, info) if choice_coercion_annotation is not None else None
    if choices is not None:  # typer: Annotated[Any, BeforeValidator(coerce_cli_choice(...))]
        try:
            return coerce_cli_choice(value, choices=choices[0], case_sensitive=choices[1], ctx=ctx)
        except ValueError:  # typer raises it again and words the error
            return _TYPER
    if annotation is str:  # typer: Annotated[str, BeforeValidator(str)]
        return value
    if annotation is int and _PLAIN_INT.fullmatch(value) and not getattr(info, "clamp", None):
        number = int(value)
        low, high = getattr(info, "min", None), getattr(info, "max", None)
        if (low is None or number >= low) and (high is None or number <= high):
            return number
    return _TYPER


def _int_default(value: int, info) -> Any:
    """An int within the parameter's bounds is typer's answer for an int parameter; the rest is typer's."""
    low, high = getattr(info, "min", None), getattr(info, "max", None)
    if getattr(info, "clamp", None) or (low is not None and value < low) or (high is not None and value > high):
        return _TYPER
    return value

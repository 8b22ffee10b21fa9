"""cattrs converters: one strict (config files), one lenient (wires).

Strict: unknown keys are errors, and scalars are never coerced (`"false"` is not a bool, `5` is not a
string). Lenient: unknown keys are ignored, for forward compatibility of the durable and crew wires;
scalars are still checked, because a wrong type from a peer is a peer bug we report, not guess around.
"""

from __future__ import annotations

import cattrs
from cattrs.v import format_exception


def _strict(kind: type, name: str):
    def hook(value, _type):
        # bool is an int subclass: refuse it where a number is wanted, and vice versa.
        if type(value) is bool and kind is not bool:
            raise TypeError(f"expected {name}, got bool {value!r}")
        if kind is float and type(value) is int:
            return float(value)
        if not isinstance(value, kind):
            raise TypeError(f"expected {name}, got {type(value).__name__} {value!r:.40}")
        return value

    return hook


def _register_scalars(conv: cattrs.Converter) -> cattrs.Converter:
    for kind, name in ((str, "a string"), (int, "an integer"), (bool, "true or false"), (float, "a number")):
        conv.register_structure_hook(kind, _strict(kind, name))
    return conv


def strict_converter() -> cattrs.Converter:
    return _register_scalars(cattrs.Converter(forbid_extra_keys=True))


def lenient_converter() -> cattrs.Converter:
    return _register_scalars(cattrs.Converter(forbid_extra_keys=False))


def _format(exc: BaseException, type_) -> str:
    if isinstance(exc, KeyError):
        return "required field missing"
    if isinstance(exc, (TypeError, ValueError)) and exc.args and isinstance(exc.args[0], str):
        if type_ is not None and "expected" not in exc.args[0]:
            return f"{exc.args[0]} (expected {getattr(type_, '__name__', type_)})"
        return exc.args[0]
    return format_exception(exc, type_)


def describe(exc: BaseException) -> list[tuple[str, str]]:
    """Flatten a cattrs error into (path, message) pairs; path like ``$.url`` or ``$``."""
    out: list[tuple[str, str]] = []
    for line in cattrs.transform_error(exc, path="$", format_exception=_format):
        msg, _, path = line.rpartition(" @ ")
        out.append((path or "$", msg or line))
    return out

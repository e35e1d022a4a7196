"""The JSON Schema subset the memory tools and the MCP server's user tools validate with.

One validator for every published tool schema, so a schema and the checks made
against it cannot drift apart.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..errors import RememberInputError


def json_text(value: Any) -> str:
    """*value* as compact JSON text (UTF-8 as is, no NaN): what a tool result carries."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


#: Every JSON type: the schema ``type`` of a value that may be any JSON value
#: (strict schema consumers want a ``type`` on every property).
JSON_TYPES: Final = ("string", "number", "integer", "boolean", "object", "array", "null")
_TYPE_NAMES: Final = {
    "object": "an object", "array": "an array", "string": "a string", "integer": "an integer",
    "number": "a number", "boolean": "true or false", "null": "null",
}
#: Python types to JSON type names, in the order they are tried (a bool is an int).
_KINDS: Final = (
    (bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
    ((list, tuple), "array"), (Mapping, "object"),
)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return next((name for kind, name in _KINDS if isinstance(value, kind)), type(value).__name__)


def _has_type(value: Any, wanted: str) -> bool:
    actual = _json_type(value)
    if wanted == "number":
        return actual in ("integer", "number") and not (
            isinstance(value, float) and not math.isfinite(value)
        )
    # Integers are strict: 5.0 is refused, like the accessor's ttl check (SPEC 1.2).
    return actual == wanted


def _where(path: str) -> str:
    return f"argument {path!r}" if path else "the arguments"


def _fail(path: str, problem: str) -> RememberInputError:
    return RememberInputError(f"{_where(path)} {problem}")


def validate_arguments(schema: Mapping[str, Any], value: Any, path: str = "") -> None:
    """Check *value* against *schema*; raise :class:`RememberInputError` on the first problem.

    Supports the keywords tool schemas use: ``type`` (a name or a list),
    ``properties``, ``required``, ``additionalProperties`` (a bool or a
    schema), ``enum``, ``const``, ``minLength``/``maxLength``,
    ``minimum``/``maximum``, ``exclusiveMinimum``/``exclusiveMaximum``,
    ``pattern``, ``items``, ``minItems``/``maxItems`` and ``anyOf``.  Other
    keywords are ignored, so a tool must still check anything more exotic
    itself.  ``integer`` means a JSON integer: ``5.0`` is refused.
    """
    if not isinstance(schema, Mapping):
        return
    wanted = schema.get("type")
    if wanted is not None:
        kinds = [wanted] if isinstance(wanted, str) else list(wanted)
        if not any(_has_type(value, k) for k in kinds):
            names = " or ".join(_TYPE_NAMES.get(k, k) for k in kinds)
            raise _fail(path, f"must be {names}; got {_json_type(value)}")
    if "const" in schema and value != schema["const"]:
        raise _fail(path, f"must be {json_text(schema['const'])}")
    if "enum" in schema:
        options = list(schema["enum"])
        if not any(value == o and type(value) is type(o) for o in options):
            shown = ", ".join(o if isinstance(o, str) else json_text(o) for o in options)
            raise _fail(path, f"must be one of {shown}; got {_shown(value)}")
    if "anyOf" in schema:
        for option in schema["anyOf"]:
            try:
                validate_arguments(option, value, path)
            except RememberInputError:
                continue
            break
        else:
            raise _fail(path, "does not match any of the allowed forms")
    if isinstance(value, str):
        _check_string(schema, value, path)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_number(schema, value, path)
    elif isinstance(value, (list, tuple)):
        _check_array(schema, value, path)
    elif isinstance(value, Mapping):
        _check_object(schema, value, path)


def _shown(value: Any) -> str:
    try:
        text = json_text(value)
    except (TypeError, ValueError):
        text = type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _check_string(schema: Mapping[str, Any], value: str, path: str) -> None:
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(low, int) and len(value) < low:
        if low == 1:
            raise _fail(path, "must not be empty")
        raise _fail(path, f"must be at least {low} characters long")
    if isinstance(high, int) and len(value) > high:
        raise _fail(path, f"must be at most {high} characters long; got {len(value)}")
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and re.search(pattern, value) is None:
        raise _fail(path, f"must match the pattern {pattern!r}")


def _check_number(schema: Mapping[str, Any], value: float, path: str) -> None:
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and value < low:
        raise _fail(path, f"must be >= {low}; got {value}")
    if high is not None and value > high:
        raise _fail(path, f"must be <= {high}; got {value}")
    xlow, xhigh = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if xlow is not None and not isinstance(xlow, bool) and value <= xlow:
        raise _fail(path, f"must be > {xlow}; got {value}")
    if xhigh is not None and not isinstance(xhigh, bool) and value >= xhigh:
        raise _fail(path, f"must be < {xhigh}; got {value}")


def _check_array(schema: Mapping[str, Any], value: Sequence[Any], path: str) -> None:
    low, high = schema.get("minItems"), schema.get("maxItems")
    if isinstance(low, int) and len(value) < low:
        raise _fail(path, f"must have at least {low} item(s)")
    if isinstance(high, int) and len(value) > high:
        raise _fail(path, f"must have at most {high} item(s); got {len(value)}")
    items = schema.get("items")
    if isinstance(items, Mapping):
        for i, item in enumerate(value):
            validate_arguments(items, item, f"{path}[{i}]")


def _check_object(schema: Mapping[str, Any], value: Mapping[str, Any], path: str) -> None:
    properties = schema.get("properties")
    props: Mapping[str, Any] = properties if isinstance(properties, Mapping) else {}
    for name in schema.get("required", ()):
        if name not in value:
            raise RememberInputError(f"missing required argument {_join(path, name)!r}")
    extra = schema.get("additionalProperties", True)
    for name in value:
        if not isinstance(name, str):
            raise _fail(path, f"has a non-string key {name!r}")
        child = _join(path, name)
        if name in props:
            validate_arguments(props[name], value[name], child)
        elif extra is False:
            allowed = ", ".join(props) or "none"
            raise RememberInputError(f"unknown argument {child!r} (allowed: {allowed})")
        elif isinstance(extra, Mapping):
            validate_arguments(extra, value[name], child)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name

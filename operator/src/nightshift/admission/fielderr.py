"""Field errors spelled as the API server spells them (k8s.io/apimachinery
pkg/util/validation/field, v0.34): `<field>: <Type>: <value>: <detail>`.

The text of one error is what `kubectl apply` prints between the brackets of
`... is invalid: [...]` and what a Status cause holds as field + message, so
`nightshift validate` and the API server can be compared string for string.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

# field.ErrorType.String()
REQUIRED = "Required value"
INVALID = "Invalid value"
TYPE_INVALID = "Invalid value"
NOT_SUPPORTED = "Unsupported value"
DUPLICATE = "Duplicate value"
FORBIDDEN = "Forbidden"
TOO_LONG = "Too long"
TOO_MANY = "Too many"
INTERNAL = "Internal error"

# Types whose errors stop the CEL rules from running (apiextensions' hasBlockingErr).
BLOCKING = frozenset({"NotSupported", "Required", "TooLong", "TooMany", "TypeInvalid"})
# ErrorBody prints no value for these types.
_NO_VALUE = frozenset({"Required", "Forbidden", "TooLong", "Internal"})
_TYPE_TEXT = {"Required": REQUIRED, "Invalid": INVALID, "TypeInvalid": TYPE_INVALID,
              "NotSupported": NOT_SUPPORTED, "Duplicate": DUPLICATE, "Forbidden": FORBIDDEN,
              "TooLong": TOO_LONG, "TooMany": TOO_MANY, "Internal": INTERNAL}
# The API server's reason for each type (a Status cause's `reason`).
REASONS = {"Required": "FieldValueRequired", "Invalid": "FieldValueInvalid",
           "TypeInvalid": "FieldValueTypeInvalid", "NotSupported": "FieldValueNotSupported",
           "Duplicate": "FieldValueDuplicate", "Forbidden": "FieldValueForbidden",
           "TooLong": "FieldValueTooLong", "TooMany": "FieldValueTooMany",
           "Internal": "InternalError"}
OMIT = object()  # field.omitValue


@dataclass(frozen=True)
class FieldError:
    type: str  # one of _TYPE_TEXT's keys
    field: str  # "<nil>" for the object itself, as field.Path prints a nil path
    value: Any = OMIT
    detail: str = ""

    def body(self) -> str:
        s = _TYPE_TEXT[self.type]
        if self.type not in _NO_VALUE and self.value is not OMIT:
            s += ": " + go_value(self.value)
        if self.detail:
            s += ": " + self.detail
        return s

    @property
    def reason(self) -> str:
        return REASONS[self.type]

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


def required(path: str, detail: str = "") -> FieldError:
    return FieldError("Required", path, detail=detail)


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError("Invalid", path, value, detail)


def not_supported(path: str, value: Any, allowed: list[Any]) -> FieldError:
    shown = [v if isinstance(v, str) else go_json(v) for v in allowed]
    detail = "supported values: " + ", ".join(go_quote(v) for v in shown) if shown else ""
    return FieldError("NotSupported", path, value, detail)


def too_long(path: str, max_length: int) -> FieldError:
    unit = "byte" if max_length == 1 else "bytes"
    return FieldError("TooLong", path, detail=f"may not be more than {max_length} {unit}")


def too_many(path: str, actual: int, maximum: int) -> FieldError:
    unit = "item" if maximum == 1 else "items"
    return FieldError("TooMany", path, actual, f"must have at most {maximum} {unit}")


def go_value(v: Any) -> str:
    """A bad value as ErrorBody prints it: %v for numbers and bools, %q for strings,
    JSON for everything else (null, lists, maps)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return go_float(v)
    if isinstance(v, str):
        return go_quote(v)
    return go_json(v)


def go_float(x: float) -> str:
    """%v of a float64: shortest representation, exponent from 1e21 up."""
    if math.isfinite(x) and x == int(x) and abs(x) < 1e21:
        return str(int(x))
    text = repr(x)
    if "e" in text:
        mant, exp = text.split("e")
        sign = exp[0] if exp[0] in "+-" else "+"
        digits = exp.lstrip("+-").rjust(2, "0")
        return f"{mant}e{sign}{digits}"
    return text


def go_quote(s: str) -> str:
    """strconv.Quote for the common cases: printable runes kept, the usual escapes."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in "\a\b\f\n\r\t\v":
            out.append({"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                        "\t": "\\t", "\v": "\\v"}[ch])
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif not ch.isprintable() and o > 0x7F:
            out.append(f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def go_json(v: Any) -> str:
    """encoding/json.Marshal: compact, map keys sorted, HTML characters escaped."""
    text = json.dumps(v, separators=(",", ":"), sort_keys=True, ensure_ascii=False,
                      default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")

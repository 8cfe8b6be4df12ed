"""A CRD's structural schema applied as the API server applies it (Kubernetes 1.34):
unknown fields (strict field validation), null pruning and defaults, then the OpenAPI
checks of k8s.io/kube-openapi's validator and the list-type set/map invariants, with
their messages.

The API server walks properties in Go map order, so its errors come in no fixed
order; callers compare them as sets.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

from nightshift.admission import fielderr as fe
from nightshift.admission.fielderr import FieldError

# metav1.ObjectMeta's JSON fields: anything else under metadata is an unknown field.
OBJECT_META_FIELDS = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
    "annotations", "ownerReferences", "finalizers", "managedFields"})
ROOT_FIELDS = frozenset({"apiVersion", "kind", "metadata"})
# strfmt.DateTime accepts RFC 3339 with or without fractions and zone.
_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?"
                        r"([Zz]|[+-]\d{2}:\d{2})?$")


def _json_type(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return "null"


def _preserves(s: dict[str, Any]) -> bool:
    return bool(s.get("x-kubernetes-preserve-unknown-fields"))


# --- before validation: what the API server does while decoding ---------------------

def unknown_fields(obj: Any, s: dict[str, Any], path: str = "") -> Iterator[str]:
    """Paths of fields the schema does not declare (strict field validation's
    `unknown field "<path>"`; without it the API server drops them silently)."""
    if isinstance(obj, dict):
        props = s.get("properties") or {}
        extra = s.get("additionalProperties")
        for k, v in obj.items():
            p = f"{path}.{k}" if path else k
            if not path and k == "metadata" and isinstance(v, dict):
                yield from (f"metadata.{m}" for m in v if m not in OBJECT_META_FIELDS)
            elif k in props:
                yield from unknown_fields(v, props[k], p)
            elif isinstance(extra, dict):
                yield from unknown_fields(v, extra, p)
            elif not (_preserves(s) or extra is True or (not path and k in ROOT_FIELDS)):
                yield p
    elif isinstance(obj, list) and isinstance(s.get("items"), dict):
        for i, v in enumerate(obj):
            yield from unknown_fields(v, s["items"], f"{path}[{i}]")


def prune(obj: Any, s: dict[str, Any], root: bool = False) -> Any:
    """A copy without unknown fields (what the API server stores)."""
    if isinstance(obj, dict):
        props = s.get("properties") or {}
        extra = s.get("additionalProperties")
        out: dict[str, Any] = {}
        for k, v in obj.items():
            if root and k == "metadata":
                out[k] = copy.deepcopy(v)
            elif k in props:
                out[k] = prune(v, props[k])
            elif isinstance(extra, dict):
                out[k] = prune(v, extra)
            elif _preserves(s) or extra is True or (root and k in ROOT_FIELDS):
                out[k] = copy.deepcopy(v)
        return out
    if isinstance(obj, list) and isinstance(s.get("items"), dict):
        return [prune(v, s["items"]) for v in obj]
    return copy.deepcopy(obj)


def default(obj: Any, s: dict[str, Any]) -> None:
    """Fill defaults in place (structural defaulting); a null where the schema is not
    nullable becomes the default or is dropped."""
    if isinstance(obj, dict):
        props = s.get("properties") or {}
        for k, prop in props.items():
            if k in obj and obj[k] is None and not prop.get("nullable"):
                if "default" in prop:
                    obj[k] = copy.deepcopy(prop["default"])
                else:
                    del obj[k]
            elif k not in obj and "default" in prop:
                obj[k] = copy.deepcopy(prop["default"])
            if k in obj:
                default(obj[k], prop)
        extra = s.get("additionalProperties")
        if isinstance(extra, dict):
            for k, v in obj.items():
                if k not in props:
                    default(v, extra)
    elif isinstance(obj, list) and isinstance(s.get("items"), dict):
        for v in obj:
            default(v, s["items"])


# --- validation: k8s.io/kube-openapi pkg/validation/validate -------------------------

def _at(path: str) -> str:
    """The field path of an error: kube-openapi's name, trimmed of its leading dot."""
    return path.lstrip(".") or "<nil>"


def validate(obj: Any, s: dict[str, Any], path: str = "") -> list[FieldError]:
    errs: list[FieldError] = []
    want = s.get("type")
    got = _json_type(obj)
    if obj is None:
        if want and not s.get("nullable"):
            errs.append(_type_error(path, want, "null"))
        return errs
    integral_float = got == "number" and float(obj).is_integer()
    if want and not (got == want or (want == "number" and got == "integer")
                     or (want == "integer" and integral_float)):
        errs.append(_type_error(path, want, got))
        errs += _enum(obj, s, path)
        return errs
    if got == "string":
        errs += _string(obj, s, path)
    elif got in ("integer", "number"):
        errs += _number(obj, s, path)
    elif got == "array":
        for i, v in enumerate(obj):
            if isinstance(s.get("items"), dict):
                errs += validate(v, s["items"], f"{path}[{i}]")
        if "minItems" in s and len(obj) < s["minItems"]:
            errs.append(fe.invalid(_at(path), len(obj), f"{_at(path)} in body should have at "
                                   f"least {s['minItems']} items"))
        if "maxItems" in s and len(obj) > s["maxItems"]:
            errs.append(fe.too_many(_at(path), len(obj), s["maxItems"]))
    errs += _enum(obj, s, path)
    if got == "object":
        errs += _object(obj, s, path)
    return errs


def _type_error(path: str, want: str, got: str) -> FieldError:
    return FieldError("TypeInvalid", _at(path), got,
                      f"{_at(path)} in body must be of type {want}: {fe.go_quote(got)}")


def _enum(obj: Any, s: dict[str, Any], path: str) -> list[FieldError]:
    allowed = s.get("enum")
    if not allowed or any(_same(obj, a) for a in allowed):
        return []
    return [fe.not_supported(_at(path), obj, list(allowed))]


def _same(v: Any, allowed: Any) -> bool:
    """Equal as JSON values: 1 and 1.0 are the same number, True is not 1."""
    def number(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)
    if number(v) and number(allowed):
        return bool(v == allowed)
    return type(v) is type(allowed) and bool(v == allowed)


def _string(v: str, s: dict[str, Any], path: str) -> list[FieldError]:
    at = _at(path)
    if "maxLength" in s and len(v) > s["maxLength"]:
        return [fe.too_long(at, s["maxLength"])]
    if "minLength" in s and len(v) < s["minLength"]:
        return [fe.invalid(at, v, f"{at} in body should be at least {s['minLength']} "
                           "chars long")]
    if "pattern" in s and not re.search(_go_regexp(s["pattern"]), v):
        return [fe.invalid(at, v, f"{at} in body should match '{s['pattern']}'")]
    if s.get("format") == "date-time" and not _DATE_TIME.match(v):
        return [fe.invalid(at, v, f"{at} in body must be of type date-time: {fe.go_quote(v)}")]
    return []


def _go_regexp(pattern: str) -> str:
    # RE2 and Python agree on the patterns CRDs use; \z is RE2's end of text.
    return pattern.replace(r"\z", r"\Z")


def _number(v: float, s: dict[str, Any], path: str) -> list[FieldError]:
    at = _at(path)
    errs = []
    if "multipleOf" in s and v % s["multipleOf"]:
        errs.append(fe.invalid(at, v, f"{at} in body should be a multiple of "
                               f"{fe.go_value(s['multipleOf'])}"))
    if "minimum" in s:
        lo, excl = s["minimum"], bool(s.get("exclusiveMinimum"))
        if v < lo or (excl and v == lo):
            rel = "greater than" if excl else "greater than or equal to"
            errs.append(fe.invalid(at, v, f"{at} in body should be {rel} {fe.go_value(lo)}"))
    if "maximum" in s:
        hi, excl = s["maximum"], bool(s.get("exclusiveMaximum"))
        if v > hi or (excl and v == hi):
            rel = "less than" if excl else "less than or equal to"
            errs.append(fe.invalid(at, v, f"{at} in body should be {rel} {fe.go_value(hi)}"))
    return errs


def _object(obj: dict[str, Any], s: dict[str, Any], path: str) -> list[FieldError]:
    at = _at(path)
    errs: list[FieldError] = []
    if "minProperties" in s and len(obj) < s["minProperties"]:
        errs.append(fe.invalid(at, len(obj), f"{at} in body should have at least "
                               f"{s['minProperties']} properties"))
    if "maxProperties" in s and len(obj) > s["maxProperties"]:
        errs.append(fe.too_many(at, len(obj), s["maxProperties"]))
    props = s.get("properties") or {}
    extra = s.get("additionalProperties")
    for k, v in obj.items():
        if k in props:
            if not (path == "" and k == "metadata"):  # ObjectMeta has its own checks
                errs += validate(v, props[k], f"{path}.{k}")
        elif isinstance(extra, dict):
            errs += validate(v, extra, f"{path}.{k}")
    for k in s.get("required") or []:
        if k not in obj:
            errs.append(fe.required(_at(f"{path}.{k}")))
    return errs


# --- x-kubernetes-list-type (apiextensions schema/listtype) ---------------------------

def list_errors(obj: Any, s: dict[str, Any], path: str = "") -> list[FieldError]:
    errs: list[FieldError] = []
    if isinstance(obj, dict):
        props = s.get("properties") or {}
        extra = s.get("additionalProperties")
        for k, v in obj.items():
            sub = props.get(k) or (extra if isinstance(extra, dict) else None)
            if sub is not None and not (path == "" and k == "metadata"):
                errs += list_errors(v, sub, f"{path}.{k}" if path else k)
    elif isinstance(obj, list):
        lt = s.get("x-kubernetes-list-type")
        if lt == "set":
            errs += [FieldError("Duplicate", f"{path}[{i}]", obj[i]) for i in _repeats(obj)]
        elif lt == "map":
            keys = s.get("x-kubernetes-list-map-keys") or []
            for i, x in enumerate(obj):
                if x is not None and not isinstance(x, dict):
                    return [fe.invalid(f"{path}[{i}]", x, "must be an object for an array of "
                                       "list-type map")]
            ids = [{k: x[k] for k in keys if k in x} if isinstance(x, dict) else {}
                   for x in obj]
            errs += [FieldError("Duplicate", f"{path}[{i}]", ids[i]) for i in _repeats(ids)]
        if isinstance(s.get("items"), dict):
            for i, v in enumerate(obj):
                errs += list_errors(v, s["items"], f"{path}[{i}]")
    return errs


def _repeats(values: list[Any]) -> list[int]:
    """Indices of the second occurrence of each repeated value."""
    seen: dict[str, int] = {}
    out = []
    for i, v in enumerate(values):
        key = fe.go_json(v)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] == 2:
            out.append(i)
    return out

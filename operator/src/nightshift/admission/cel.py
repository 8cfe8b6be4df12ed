"""x-kubernetes-validations run as the API server runs them (apiextensions-apiserver
pkg/apiserver/schema/cel/validation.go, v0.34): every rule of every schema node the
object has, `self` the node's value (the whole object at the root, with apiVersion,
kind and metadata), transition rules (oldSelf) only when an old object is given, a
failed rule reported at the node's path (plus the rule's fieldPath) as
`Invalid value: "<schema type>": <message>`.

Evaluation is cel-python's (the `validate` extra); the Kubernetes library functions
the CRDs call are the stand-ins of k8scel.py.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable
from typing import Any

from nightshift.admission import fielderr as fe
from nightshift.admission import k8scel
from nightshift.admission.fielderr import FieldError

_OLD_SELF = re.compile(r"\boldSelf\b")


class CelUnavailableError(RuntimeError):
    pass


def _celpy() -> Any:
    try:
        import celpy
    except ImportError as e:  # pragma: no cover - depends on the install
        raise CelUnavailableError("CEL rules need cel-python: pip install 'nightshift[validate]'"
                             ) from e
    return celpy


@functools.cache
def _functions() -> dict[str, Callable[..., Any]]:
    celpy = _celpy()
    from celpy import celtypes

    def url(s: Any) -> Any:
        try:
            return k8scel.parse_request_uri(str(s))
        except k8scel.URLError as e:
            return celpy.CELEvalError(f"URL parse error during conversion from string: {e}")

    return {
        "isURL": lambda s: celtypes.BoolType(k8scel.is_url(str(s))),
        "url": url,
        "getScheme": lambda u: celtypes.StringType(u.scheme),
        "getHostname": lambda u: celtypes.StringType(u.hostname()),
        "isCIDR": lambda s: celtypes.BoolType(k8scel.is_cidr(str(s))),
    }


@functools.cache
def program(expr: str) -> Any:
    celpy = _celpy()
    env = celpy.Environment()
    return env.program(env.compile(expr), functions=_functions())


def evaluate(expr: str, self_: Any, old_self: Any = None) -> Any:
    """The rule's value for a JSON-like self (and oldSelf); raises on evaluation errors."""
    celpy = _celpy()
    activation = {"self": celpy.json_to_cel(self_)}
    if old_self is not None:
        activation["oldSelf"] = celpy.json_to_cel(old_self)
    return program(expr).evaluate(activation)


def uses_old_self(rule: dict[str, Any]) -> bool:
    return bool(_OLD_SELF.search(rule.get("rule", "")))


def _child(path: str | None, name: str) -> str:
    return f"{path}.{name}" if path else name


# The first Kubernetes minor whose API server shows a failed rule's value, not the
# node's type: an object's or a list's error then has no value, a scalar's the value
# itself (apiextensions-apiserver v0.35.0, pkg/apiserver/schema/cel/validation.go).
# Before it, every failed rule printed the type ("object", "string", ...).
RULE_VALUE_SHOWN = 35
NEWEST = 10**6  # "no particular release": the newest behaviour


def _failed_rule_value(value: Any, shown_type: str, minor: int) -> Any:
    if minor < RULE_VALUE_SHOWN:
        return shown_type
    return fe.OMIT if shown_type in ("object", "array") else value


def rule_errors(value: Any, s: dict[str, Any], path: str | None, old: Any,
                root: bool = False, minor: int = NEWEST) -> list[FieldError]:
    """The failed rules of one node (not of its children), worded as the API server of
    Kubernetes 1.`minor` words them."""
    celpy = _celpy()
    from celpy import celtypes

    errs: list[FieldError] = []
    shown_type = s.get("type", "")
    at = path or "<nil>"
    for rule in s.get("x-kubernetes-validations") or []:
        if uses_old_self(rule) and old is None and not rule.get("optionalOldSelf"):
            continue
        text = rule["rule"].strip()
        where = at
        if rule.get("fieldPath"):
            where = (path or "") + rule["fieldPath"] if rule["fieldPath"].startswith(".") \
                else _child(path, rule["fieldPath"])
        try:
            ok = evaluate(rule["rule"], value, old)
        except celpy.CELEvalError as e:
            why = ("invalid data, expected int, got float64" if _float_for_int(value, s)
                   else _eval_text(e))
            errs.append(fe.invalid(at, shown_type, f"{why} evaluating rule: "
                                   f"{(rule.get('message') or text).strip()}"))
            continue
        if isinstance(ok, celtypes.BoolType) and bool(ok):
            continue
        message = (rule.get("message") or "").strip() or f"failed rule: {text}"
        if rule.get("messageExpression"):
            with contextlib.suppress(celpy.CELEvalError):
                message = str(evaluate(rule["messageExpression"], value, old))
        errs.append(_for_reason(rule.get("reason"), where,
                                _failed_rule_value(value, shown_type, minor), message))
    return errs


def _float_for_int(value: Any, s: dict[str, Any]) -> bool:
    """A float where the schema says integer (admitted when integral): the API server's
    CEL values refuse to read it, whatever the rule."""
    if isinstance(value, float):
        return s.get("type") == "integer"
    if isinstance(value, dict):
        props = s.get("properties") or {}
        return any(_float_for_int(v, props[k]) for k, v in value.items() if k in props)
    if isinstance(value, list) and isinstance(s.get("items"), dict):
        return any(_float_for_int(v, s["items"]) for v in value)
    return False


def _eval_text(e: Exception) -> str:
    args = getattr(e, "args", ())
    return str(args[0]) if args else str(e)


def _for_reason(reason: str | None, path: str, value: Any, detail: str) -> FieldError:
    if reason == "FieldValueForbidden":
        return fe.FieldError("Forbidden", path, detail=detail)
    if reason == "FieldValueRequired":
        return fe.required(path, detail)
    if reason == "FieldValueDuplicate":
        return fe.FieldError("Duplicate", path, value)
    return fe.invalid(path, value, detail)


def cel_errors(value: Any, s: dict[str, Any], old: Any = None, path: str | None = None,
               root: bool = True, minor: int = NEWEST) -> list[FieldError]:
    """Every failed rule in the object, children after their parent as the API server
    walks them."""
    if value is None:
        return []
    errs = rule_errors(value, s, path, old, minor=minor)
    if isinstance(value, list) and isinstance(s.get("items"), dict):
        olds = _correlate(value, old, s)
        for i, v in enumerate(value):
            errs += cel_errors(v, s["items"], olds[i], f"{path or ''}[{i}]", root=False,
                               minor=minor)
    elif isinstance(value, dict):
        props = s.get("properties") or {}
        extra = s.get("additionalProperties")
        old_map = old if isinstance(old, dict) else {}
        for k, v in value.items():
            if k in props:
                if not (root and k == "metadata"):
                    errs += cel_errors(v, props[k], old_map.get(k), _child(path, k), False,
                                       minor)
            elif isinstance(extra, dict):
                errs += cel_errors(v, extra, old_map.get(k), f"{path or ''}[{k}]", False,
                                   minor)
    return errs


def _correlate(items: list[Any], old: Any, s: dict[str, Any]) -> list[Any]:
    """The old item each new item is compared with: by key in list-type maps, none in
    other lists (as the API server correlates them)."""
    keys = s.get("x-kubernetes-list-map-keys") or []
    if s.get("x-kubernetes-list-type") != "map" or not isinstance(old, list) or not keys:
        return [None] * len(items)
    index = {tuple(o.get(k) for k in keys): o for o in old if isinstance(o, dict)}
    return [index.get(tuple(x.get(k) for k in keys)) if isinstance(x, dict) else None
            for x in items]


def functions_used(expr: str) -> set[str]:
    """Names called in a rule (`f(` or `.f(`), for the check that the CRDs use only the
    library functions this module provides."""
    return set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", expr))

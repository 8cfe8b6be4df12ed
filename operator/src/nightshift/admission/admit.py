"""What the API server answers to a create (or update) of a Nightshift object, offline.

The steps and their order follow apiextensions-apiserver's custom resource handler:
strict decoding (unknown fields), status dropped (status subresource), defaults, then
ObjectMeta, the OpenAPI schema and list-type checks, and the CEL rules unless an
earlier error blocks them (hasBlockingErr). The API server stops at unknown fields;
this goes on with them pruned, so one run shows every problem.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from nightshift.admission import fielderr as fe
from nightshift.admission import schema
from nightshift.admission.cel import NEWEST, cel_errors
from nightshift.admission.crds import Crd
from nightshift.admission.fielderr import FieldError
from nightshift.admission.meta import validate_meta

BLOCKED = ("some validation rules were not checked because the object was invalid; "
           "correct the existing errors to complete validation")


@dataclass
class Admission:
    # Strict field validation's complaints: `unknown field "spec.foo"`.
    unknown: list[str] = field(default_factory=list)
    errors: list[FieldError] = field(default_factory=list)
    # The object as it would be stored (pruned, defaulted), for the operator's checks.
    stored: dict[str, Any] = field(default_factory=dict)

    @property
    def messages(self) -> list[str]:
        return [f'unknown field "{p}"' for p in self.unknown] + [str(e) for e in self.errors]

    @property
    def ok(self) -> bool:
        return not self.unknown and not self.errors


def stored_form(obj: dict[str, Any], crd: Crd) -> dict[str, Any]:
    out: dict[str, Any] = schema.prune(obj, crd.schema, root=True)
    if crd.status_subresource:
        out.pop("status", None)
    schema.default(out, crd.schema)
    return out


def admit(obj: dict[str, Any], crd: Crd, old: dict[str, Any] | None = None,
          minor: int = NEWEST) -> Admission:
    """The API server's verdict on a create (an update with `old`), in the words of
    Kubernetes 1.`minor` (the newest behaviour by default)."""
    result = Admission(unknown=list(schema.unknown_fields(obj, crd.schema)))
    new = stored_form(obj, crd)
    result.stored = new
    prior = stored_form(old, crd) if old is not None else None
    errs: list[FieldError] = []
    errs += validate_meta(new.get("metadata") or {})
    errs += schema.validate(new, crd.schema)
    errs += schema.list_errors(new, crd.schema)
    if any(e.type in fe.BLOCKING for e in errs):
        errs.append(fe.invalid("<nil>", None, BLOCKED))
    else:
        seen = copy.deepcopy(new)
        meta = seen.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            # What the rules see of a generated name: its length (58 + 5 characters).
            meta["name"] = str(meta["generateName"])[:58] + "xxxxx"
        errs += cel_errors(seen, crd.schema, prior, minor=minor)
    result.errors = errs
    return result

"""ObjectMeta checks the API server makes on every custom resource
(k8s.io/apimachinery api/validation ValidateObjectMetaAccessor, v0.34): name or
generateName, namespace, labels. Annotations, owner references and finalizers are
written by controllers, not by manifests, and are not checked here.
"""

from __future__ import annotations

import re
from typing import Any

from nightshift.admission import fielderr as fe
from nightshift.admission.fielderr import FieldError

_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = _LABEL + "(\\." + _LABEL + ")*"
_QNAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = "(" + _QNAME + ")?"
_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                  "characters, '-' or '.', and must start and end with an alphanumeric "
                  "character")
_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
              "or '-', and must start and end with an alphanumeric character")
_QNAME_MSG = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and "
              "end with an alphanumeric character")
_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, "
              "'-', '_' or '.', and must start and end with an alphanumeric character")


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _full(pattern: str, value: str) -> bool:
    return re.fullmatch(pattern, value) is not None


def dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not _full(_SUBDOMAIN, value):
        errs.append(regex_error(_SUBDOMAIN_MSG, _SUBDOMAIN, "example.com"))
    return errs


def dns1123_label(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _full(_LABEL, value):
        errs.append("must not contain dots" if _full(_SUBDOMAIN, value)
                    else regex_error(_LABEL_MSG, _LABEL, "my-name", "123-abc"))
    return errs


def qualified_name(value: str) -> list[str]:
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) > 2:
        return ["a qualified name " + regex_error(_QNAME_MSG, _QNAME, "MyName", "my.name",
                                                  "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    name = parts[-1]
    if len(parts) == 2:
        if not parts[0]:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + m for m in dns1123_subdomain(parts[0])]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if not _full(_QNAME, name):
        errs.append("name part " + regex_error(_QNAME_MSG, _QNAME, "MyName", "my.name",
                                               "123-abc"))
    return errs


def label_value(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _full(_LABEL_VALUE, value):
        errs.append(regex_error(_VALUE_MSG, _LABEL_VALUE, "MyValue", "my_value", "12345"))
    return errs


def validate_meta(meta: dict[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    generate = meta.get("generateName") or ""
    if generate:
        # NameIsDNSSubdomain with prefix=true: a trailing '-' is allowed.
        probe = generate[:-1] if generate.endswith("-") else generate
        errs += [fe.invalid("metadata.generateName", generate, m)
                 for m in dns1123_subdomain(probe)]
    name = meta.get("name") or ""
    if not name and generate:
        pass  # the API server names it generateName + 5 random characters; checked above
    elif not name:
        errs.append(fe.required("metadata.name", "name or generateName is required"))
    else:
        errs += [fe.invalid("metadata.name", name, m) for m in dns1123_subdomain(name)]
    namespace = meta.get("namespace")
    if namespace:
        errs += [fe.invalid("metadata.namespace", namespace, m)
                 for m in dns1123_label(namespace)]
    for key, value in (meta.get("labels") or {}).items():
        errs += [fe.invalid("metadata.labels", key, m) for m in qualified_name(str(key))]
        errs += [fe.invalid("metadata.labels", value, m) for m in label_value(str(value))]
    return errs

"""Values a run puts into its Jobs' pods, checked as the API server and kubelet check them.

The CRD refuses most of these at admission (patterns and CEL in crds/pipelinerun.yaml);
what CEL cannot afford (quantities and their relations, key lengths, sizes) and objects
stored before a rule existed are caught here, so a value the API server would refuse in
a Job never reaches it: it becomes an Invalid condition naming the run's field. The
classes were found by applying rendered Jobs to a real API server (docs/security.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from nightshift.api import names
from nightshift.api.problems import Problem
from nightshift.api.quantities import quantity
from nightshift.pipelinerun.spec import PipelineRunSpec, Stage, StorageRef

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# What the kubelet can pull (distribution's reference grammar; repository lower case).
IMAGE = re.compile(
    r"^((([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(\.([a-zA-Z0-9]|[a-zA-Z0-9]"
    r"[a-zA-Z0-9-]*[a-zA-Z0-9]))*|\[[0-9a-fA-F:.]+\])(:[0-9]+)?/)?[a-z0-9]+((\.|_|__|-+)"
    r"[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$")
# Printable ASCII but '=' (RelaxedEnvironmentVariableValidation, GA in Kubernetes 1.34).
ENV_NAME = re.compile(r"^[ -<>-~]+$")
CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
FIELD_PATH = re.compile(r"^(metadata\.(name|namespace|uid)|spec\.(nodeName|serviceAccountName)"
                        r"|status\.(hostIPs?|podIPs?)|metadata\.(labels|annotations)\[.+\])$")
RESOURCE_FIELD = re.compile(r"^(limits|requests)\.(cpu|memory|ephemeral-storage|hugepages-.+)$")
STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")
# All annotations of an object together (the API server's TotalAnnotationSizeLimitB).
ANNOTATIONS_BYTES = 256 * 1024


def pod_asks(resources: Mapping[str, Any]) -> dict[str, Any]:
    """What one pod of a stage asks for, by resource: its request, else its limit (the
    API server makes a limit the request when none is given)."""
    return {**(resources.get("limits") or {}), **(resources.get("requests") or {})}


def qualified_name_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        return f"key {key!r}: the prefix before '/' must be a DNS subdomain (e.g. example.com)"
    if not name or len(name) > 63 or not _NAME_PART.match(name):
        return (f"key {key!r}: the name must be 1-63 letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit")
    return None


def image_problem(path: str, image: str) -> list[Problem]:
    if IMAGE.match(image):
        return []
    return [Problem(path, f"{image!r} is not an image reference the kubelet can pull; write "
                    "[registry/]repository[:tag][@digest] with the repository in lower case "
                    "and no spaces")]


def labels_problems(path: str, labels: Mapping[str, Any]) -> list[Problem]:
    p = [Problem(path, problem) for k in labels if (problem := qualified_name_problem(k))]
    for k, v in labels.items():
        if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE.match(v):
            p.append(Problem(f"{path}[{k}]", f"{str(v)[:70]!r} is not a label value: at most "
                             "63 letters, digits, '-', '_' or '.', starting and ending with "
                             "a letter or digit"))
    return p


def annotations_problems(path: str, annotations: Mapping[str, Any]) -> list[Problem]:
    p = [Problem(path, problem) for k in annotations if (problem := qualified_name_problem(k))]
    size = sum(len(k.encode()) + len(str(v).encode()) for k, v in annotations.items())
    if size > ANNOTATIONS_BYTES - 1024:  # room for Nightshift's own
        p.append(Problem(path, f"{size} bytes of annotations; a pod's annotations must stay "
                         f"under {ANNOTATIONS_BYTES} bytes"))
    return p


# NIGHTSHIFT_* names a stage's env may set: the knobs docs name for users (every other
# NIGHTSHIFT_ name is the operator's or run.sh's own).
USER_KNOBS = frozenset({names.ENV_FUSE_WAIT_S})


def env_problems(path: str, env: Sequence[Mapping[str, Any]]) -> list[Problem]:
    p: list[Problem] = []
    for i, e in enumerate(env):
        at = f"{path}[{i}]"
        name = e.get("name")
        if not isinstance(name, str) or not name:
            p.append(Problem(f"{at}.name", "is required: the variable's name"))
        elif not ENV_NAME.match(name):
            p.append(Problem(f"{at}.name", f"{name!r} must be printable ASCII without '='"))
        elif name == "JOB_COMPLETION_INDEX" or (name.startswith("NIGHTSHIFT_")
                                                and name not in USER_KNOBS):
            # The Job controller leaves a container's own JOB_COMPLETION_INDEX alone, and
            # run.sh reads NIGHTSHIFT_*: either would run every pod on the wrong item(s).
            p.append(Problem(f"{at}.name", f"{name} is set by "
                             f"{'the Job controller' if name[0] == 'J' else 'Nightshift'} "
                             "for each pod (the item's index, the run's own settings); "
                             "rename the variable", ratchet=True))
        value = e.get("value")
        if value is not None and not isinstance(value, str):
            p.append(Problem(f"{at}.value", f"{value!r} must be a string; quote it"))
        source = e.get("valueFrom")
        if source is None:
            continue
        if value:
            p.append(Problem(at, "sets both value and valueFrom; set one of them"))
        p += _value_from(f"{at}.valueFrom", source)
    return p


def _value_from(path: str, source: Any) -> list[Problem]:
    kinds = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef")
    if not isinstance(source, Mapping) or sum(k in source for k in kinds) != 1:
        return [Problem(path, f"must set exactly one of {', '.join(kinds)}")]
    p: list[Problem] = []
    if "fieldRef" in source:
        fp = (source["fieldRef"] or {}).get("fieldPath")
        if not isinstance(fp, str) or not FIELD_PATH.match(fp):
            p.append(Problem(f"{path}.fieldRef.fieldPath", f"{fp!r} is not a pod field an env "
                             "var can read (metadata.name, metadata.labels['<key>'], "
                             "spec.nodeName, status.podIP, ...)"))
    elif "resourceFieldRef" in source:
        res = (source["resourceFieldRef"] or {}).get("resource")
        if not isinstance(res, str) or not RESOURCE_FIELD.match(res):
            p.append(Problem(f"{path}.resourceFieldRef.resource", f"{res!r} must be limits. or "
                             "requests. followed by cpu, memory, ephemeral-storage or "
                             "hugepages-<size>"))
    else:
        kind = "configMapKeyRef" if "configMapKeyRef" in source else "secretKeyRef"
        ref = source[kind] or {}
        name, key = ref.get("name"), ref.get("key")
        if not isinstance(name, str) or len(name) > 253 or not DNS_SUBDOMAIN.match(name):
            p.append(Problem(f"{path}.{kind}.name", f"{name!r} must be a DNS subdomain "
                             "(lower-case letters, digits, '-' and '.')"))
        if not isinstance(key, str) or len(key) > 253 or not CONFIG_KEY.match(key):
            p.append(Problem(f"{path}.{kind}.key", f"{key!r} must be a key: letters, digits, "
                             "'-', '_' and '.'"))
    return p


def resources_problems(path: str, resources: Mapping[str, Any]) -> list[Problem]:
    p = [Problem(f"{path}.{k}", "is not a field of resources; use requests, limits or claims")
         for k in resources if k not in ("requests", "limits", "claims")]
    values: dict[str, dict[str, Decimal]] = {"requests": {}, "limits": {}}
    for kind in ("requests", "limits"):
        amounts = resources.get(kind) or {}
        if not isinstance(amounts, Mapping):
            p.append(Problem(f"{path}.{kind}", "must map resource names to quantities"))
            continue
        for name, raw in amounts.items():
            at = f"{path}.{kind}[{name}]"
            if not (name in STANDARD_RESOURCES or name.startswith("hugepages-")
                    or ("/" in name and not name.startswith("kubernetes.io/")
                        and qualified_name_problem(name) is None)):
                p.append(Problem(at, f"{name!r} is not a resource a container can ask for: "
                                 "cpu, memory, ephemeral-storage, hugepages-<size>, or a "
                                 "domain-qualified extended resource such as nvidia.com/gpu"))
            q = quantity(raw)
            if q is None:
                p.append(Problem(at, f"{raw!r} is not a quantity; write e.g. 500m, 2, 4Gi"))
            elif q < 0:
                p.append(Problem(at, f"{raw!r} must not be negative"))
            else:
                values[kind][name] = q
    req, lim = values["requests"], values["limits"]
    for name, q in req.items():
        if name in lim and q > lim[name]:
            p.append(Problem(f"{path}.requests[{name}]", f"is above its limit "
                             f"({resources['limits'][name]!r}); lower it or raise the limit"))
        exact = "/" in name or name.startswith("hugepages-")
        if exact and lim.get(name) != q:
            p.append(Problem(f"{path}.limits[{name}]", f"{name} cannot be overcommitted: set a "
                             "limit equal to its request"))
    huge = any(n.startswith("hugepages-") for n in [*req, *lim])
    if huge and not any(n in ("cpu", "memory") for n in [*req, *lim]):
        p.append(Problem(path, "hugepages need a cpu or memory request or limit too"))
    return p


def _name(path: str, value: str | None, pattern: re.Pattern[str], limit: int,
          what: str) -> list[Problem]:
    if value is None or (len(value) <= limit and pattern.match(value)):
        return []
    return [Problem(path, f"{value!r} must be {what} of at most {limit} characters")]


_LABEL_TEXT = "a DNS label (lower-case letters, digits and '-')"
_SUBDOMAIN_TEXT = "a DNS subdomain (lower-case letters, digits, '-' and '.')"


def stage_problems(path: str, st: Stage) -> list[Problem]:
    """Every value of a stage that lands in its Job's pod template."""
    p = image_problem(f"{path}.image", st.image)
    p += env_problems(f"{path}.env", st.env)
    for j, step in enumerate(st.steps):
        p += env_problems(f"{path}.steps[{j}].env", step.env)
        if step.image is not None:
            p += image_problem(f"{path}.steps[{j}].image", step.image)
    p += resources_problems(f"{path}.resources", st.resources)
    p += labels_problems(f"{path}.podLabels", st.pod_labels)
    p += annotations_problems(f"{path}.podAnnotations", st.pod_annotations)
    # The pool is a nodeSelector label value and a toleration value.
    p += _name(f"{path}.pool", st.pool, DNS_LABEL, 63, _LABEL_TEXT)
    p += _name(f"{path}.serviceAccountName", st.service_account_name, DNS_SUBDOMAIN, 253,
               _SUBDOMAIN_TEXT)
    return p


def storage_problems(path: str, ref: StorageRef) -> list[Problem]:
    # The name becomes a pod volume's name, "nightshift-storage-<name>": a DNS label.
    p = _name(f"{path}.name", ref.name, DNS_LABEL, 44, _LABEL_TEXT)
    if ref.s3 is not None:
        p += _name(f"{path}.s3.credentialsSecret", ref.s3.credentials_secret, DNS_SUBDOMAIN,
                   253, _SUBDOMAIN_TEXT)
    if ref.pvc is not None:
        p += _name(f"{path}.pvc.claimName", ref.pvc.claim_name, DNS_SUBDOMAIN, 253,
                   _SUBDOMAIN_TEXT)
        sub = ref.pvc.sub_path
        if sub.startswith("/") or ".." in sub.split("/"):
            p.append(Problem(f"{path}.pvc.subPath", f"{sub!r} must be a relative path with "
                             "no '..' (it is a volume mount's subPath)"))
    return p


def spec_problems(spec: PipelineRunSpec) -> list[Problem]:
    """The run-wide values that land in pods (stages and storages are checked apart)."""
    p = _name("spec.virtualCluster", spec.virtual_cluster, DNS_LABEL, 63, _LABEL_TEXT)
    if spec.runner_image is not None:
        p += image_problem("spec.runnerImage", spec.runner_image)
    return p

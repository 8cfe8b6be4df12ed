"""The only module that talks to the Kubernetes API (kopf's own watches aside).

Generic, dict-in dict-out calls on top of the official client's transport and config
loading (kubeconfig, in-cluster, EKS exec plugins): server-side apply, get, list,
delete, status patches and events. Resource paths come from a small table of the
kinds Nightshift touches, with API discovery as the fallback.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import urllib3.exceptions
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from nightshift import metrics
from nightshift.api import names
from nightshift.api.conditions import now_rfc3339

Obj = dict[str, Any]


class KubeError(Exception):
    def __init__(self, status: int, reason: str, message: str, obj: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        # "Kind name" of the object the call concerned, when naming() knew it.
        self.obj = obj

    @property
    def transient(self) -> bool:
        """Whether the same call may succeed later without anyone changing anything:
        the API server not reached (status 0), the operator's token refreshed (401), a
        timeout, a conflict, throttling or the server's own trouble."""
        return self.status in (0, 401, 408, 409, 429) or self.status >= 500


# The transport's own failures (connection refused or reset, timeouts, TLS): the API
# server was not reached, so there is no status; they become KubeError status 0, so
# every caller that tells API errors from bugs treats them as the former.
_UNREACHED = (urllib3.exceptions.HTTPError, OSError)
UNREACHED_REASON = "Unreachable"

# The engine runs at most this many passes at once (engine/loop.py), each making its
# calls on one pooled connection: more passes than connections would open and discard
# connections (urllib3's "Connection pool is full").
CONNECTIONS = 8


@contextlib.contextmanager
def naming(kind: str, name: str, doing: str) -> Iterator[None]:
    """Re-raise a KubeError with the object it concerns, so the condition a user sees
    says which object the API server refused, not only why."""
    try:
        yield
    except KubeError as e:
        raise KubeError(e.status, e.reason, f"{doing} {kind} {name}: {e.message}",
                        obj=f"{kind} {name}") from None


def resource_of(path: str) -> str:
    """`jobs`, `jobs/status`, `nodes`... from a request path (for metrics labels)."""
    seg = path.split("?", maxsplit=1)[0].strip("/").split("/")
    start = 2 if seg[0] == "api" else 3
    rest = seg[start:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    return "/".join([rest[0], *rest[2:3]]) if rest else "?"


@dataclass(frozen=True)
class Resource:
    plural: str
    namespaced: bool


# (apiVersion, kind) -> resource. Discovery fills in anything else.
KNOWN: dict[tuple[str, str], Resource] = {
    ("v1", "ConfigMap"): Resource("configmaps", True),
    ("v1", "Secret"): Resource("secrets", True),
    ("v1", "Pod"): Resource("pods", True),
    ("v1", "Node"): Resource("nodes", False),
    ("v1", "Namespace"): Resource("namespaces", False),
    ("v1", "Service"): Resource("services", True),
    ("v1", "ServiceAccount"): Resource("serviceaccounts", True),
    ("v1", "Event"): Resource("events", True),
    ("v1", "PersistentVolumeClaim"): Resource("persistentvolumeclaims", True),
    ("batch/v1", "Job"): Resource("jobs", True),
    ("apps/v1", "Deployment"): Resource("deployments", True),
    ("apps/v1", "DaemonSet"): Resource("daemonsets", True),
    ("apps/v1", "StatefulSet"): Resource("statefulsets", True),
    ("autoscaling/v2", "HorizontalPodAutoscaler"): Resource("horizontalpodautoscalers", True),
    ("v1", "PersistentVolume"): Resource("persistentvolumes", False),
    ("storage.k8s.io/v1", "StorageClass"): Resource("storageclasses", False),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"):
        Resource("customresourcedefinitions", False),
    ("karpenter.sh/v1", "NodePool"): Resource("nodepools", False),
    ("karpenter.sh/v1", "NodeClaim"): Resource("nodeclaims", False),
    ("karpenter.k8s.aws/v1", "EC2NodeClass"): Resource("ec2nodeclasses", False),
    ("karpenter.kwok.sh/v1alpha1", "KWOKNodeClass"): Resource("kwoknodeclasses", False),
    ("kubeflow.org/v2beta1", "MPIJob"): Resource("mpijobs", True),
    (names.API_VERSION, names.PIPELINERUN): Resource(names.PIPELINERUNS, True),
    (names.API_VERSION, names.VIRTUALCLUSTER): Resource(names.VIRTUALCLUSTERS, True),
    (names.API_VERSION, names.SHAREDSTORAGE): Resource(names.SHAREDSTORAGES, True),
}


def _base(api_version: str) -> str:
    return f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"


class Kube:
    def __init__(self, api_client: Any, field_manager: str = names.FIELD_MANAGER,
                 request_timeout: float = 60) -> None:
        self._api = api_client
        self.field_manager = field_manager
        self.request_timeout = request_timeout
        self._discovered: dict[tuple[str, str], Resource] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, kubeconfig: str | None = None) -> Kube:
        """In-cluster config inside a pod, else KUBECONFIG / ~/.kube/config."""
        cfg = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException:
            config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        cfg.connection_pool_maxsize = CONNECTIONS
        return cls(client.ApiClient(cfg))

    @classmethod
    def for_user(cls, kubeconfig: str | None = None, context: str | None = None) -> Kube:
        """A person's client, chosen as kubectl chooses: the kubeconfig (--kubeconfig,
        KUBECONFIG, ~/.kube/config) and its context first, in-cluster config only when
        there is no kubeconfig (a plugin run from a pod)."""
        cfg = client.Configuration()
        try:
            config.load_kube_config(config_file=kubeconfig, context=context,
                                    client_configuration=cfg)
        except (yaml.YAMLError, OSError) as e:  # the client reads the file as YAML
            where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise KubeError(0, "BadKubeconfig", f"kubeconfig {where}: cannot read it: "
                            f"{' '.join(str(e).split())}") from None
        except config.ConfigException as e:
            if kubeconfig or context:
                raise KubeError(0, "BadKubeconfig", f"kubeconfig {kubeconfig or ''} "
                                f"context {context or '(current)'}: {e}") from None
            try:
                config.load_incluster_config(client_configuration=cfg)
            except config.ConfigException:
                raise KubeError(0, "NoKubeconfig", f"no kubeconfig ({e}; set KUBECONFIG "
                                "or pass --kubeconfig) and not running in a pod") from None
        return cls(client.ApiClient(cfg))

    # -- paths -----------------------------------------------------------------------
    def resource(self, api_version: str, kind: str) -> Resource:
        key = (api_version, kind)
        if key in KNOWN:
            return KNOWN[key]
        with self._lock:
            if key not in self._discovered:
                listing = self._call("GET", _base(api_version))
                for r in listing.get("resources", []):
                    if "/" not in r["name"]:
                        self._discovered[(api_version, r["kind"])] = Resource(
                            r["name"], bool(r["namespaced"]))
            if key not in self._discovered:
                raise KubeError(404, "NotFound", f"{kind} is not served at {api_version}")
            return self._discovered[key]

    def path(self, api_version: str, kind: str, namespace: str | None = None,
             name: str | None = None, subresource: str | None = None) -> str:
        res = self.resource(api_version, kind)
        p = _base(api_version)
        if res.namespaced and namespace:
            p += f"/namespaces/{namespace}"
        p += f"/{res.plural}"
        if name:
            p += f"/{name}"
        if subresource:
            p += f"/{subresource}"
        return p

    # -- calls -----------------------------------------------------------------------
    def _call(self, method: str, path: str, body: Any = None,
              query: Sequence[tuple[str, Any]] = (), content_type: str | None = None,
              accept: str = "application/json") -> Obj:
        metrics.API_CALLS.labels(method, resource_of(path)).inc()
        headers = {"Accept": accept}
        payload: Any = None
        if body is not None:
            headers["Content-Type"] = content_type = content_type or "application/json"
            # The client JSON-encodes bodies of +json types itself; anything else (apply
            # patches are YAML, of which JSON is a subset) it sends as given.
            payload = body if content_type.endswith("json") else json.dumps(body)
        try:
            m, url, hdrs, _, _ = self._api.param_serialize(
                method=method, resource_path=path, query_params=list(query),
                header_params=headers, auth_settings=["BearerToken"])
            resp = self._api.call_api(m, url, header_params=hdrs, body=payload,
                                      _request_timeout=self.request_timeout)
            data = resp.read()
        except ApiException as e:
            raise _error(e) from None
        except _UNREACHED as e:
            raise _unreached(method, path, e) from None
        if not 200 <= resp.status < 300:
            raise _error(ApiException(status=resp.status, reason=resp.reason,
                                      body=data.decode(errors="replace") if data else None))
        return cast(Obj, json.loads(data) if data else {})

    def apply(self, obj: Mapping[str, Any], force: bool = True,
              subresource: str | None = None) -> Obj:
        """Server-side apply: idempotent, and only the fields we own are ours."""
        meta = obj["metadata"]
        path = self.path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"],
                         subresource)
        query = [("fieldManager", self.field_manager)]
        if force:
            query.append(("force", "true"))
        return self._call("PATCH", path, dict(obj), query, "application/apply-patch+yaml")

    def get(self, api_version: str, kind: str, name: str,
            namespace: str | None = None) -> Obj | None:
        try:
            return self._call("GET", self.path(api_version, kind, namespace, name))
        except KubeError as e:
            if e.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             label_selector: str | None = None, field_selector: str | None = None,
             limit: int | None = None) -> list[Obj]:
        query: list[tuple[str, Any]] = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if limit:
            query.append(("limit", limit))
        out = self._call("GET", self.path(api_version, kind, namespace), query=query)
        items = cast(list[Obj], out.get("items") or [])
        # The list response omits apiVersion/kind on items; restore them for callers.
        for it in items:
            it.setdefault("apiVersion", api_version)
            it.setdefault("kind", kind)
        return items

    def list_metadata(self, api_version: str, kind: str, namespace: str | None = None,
                      label_selector: str | None = None) -> builtins.list[Obj]:
        """Only the metadata of matching objects: a run's item ConfigMaps can hold MBs."""
        query: list[tuple[str, Any]] = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        out = self._call("GET", self.path(api_version, kind, namespace), query=query,
                         accept="application/json;as=PartialObjectMetadataList;"
                                "g=meta.k8s.io;v=v1,application/json")
        return cast(builtins.list[Obj], out.get("items") or [])

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None,
               propagation: str = "Background") -> bool:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
        try:
            self._call("DELETE", self.path(api_version, kind, namespace, name), body)
        except KubeError as e:
            if e.status == 404:
                return False
            raise
        return True

    def merge_patch(self, api_version: str, kind: str, name: str, namespace: str | None,
                    patch: Mapping[str, Any], subresource: str | None = None) -> Obj:
        return self._call("PATCH", self.path(api_version, kind, namespace, name, subresource),
                          dict(patch), content_type="application/merge-patch+json")

    def patch_status(self, api_version: str, kind: str, name: str, namespace: str | None,
                     status: Mapping[str, Any], resource_version: str | None = None,
                     old: Mapping[str, Any] | None = None) -> Obj:
        """Replace .status with a merge patch (lists in status are replaced whole). A
        merge patch keeps what it does not name, so the keys of `old`, the status read,
        that `status` lacks are sent as null: removed."""
        patch: dict[str, Any] = {"status": with_removals(old or {}, status)}
        if resource_version:
            # Optimistic concurrency: a stale writer gets 409 and re-reads.
            patch["metadata"] = {"resourceVersion": resource_version}
        return self.merge_patch(api_version, kind, name, namespace, patch, "status")

    def event(self, regarding: Mapping[str, Any], type_: str, reason: str, message: str,
              component: str = "nightshift-operator") -> None:
        meta = regarding["metadata"]
        ns = meta.get("namespace") or "default"
        now = now_rfc3339()
        ev = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": ns},
            "involvedObject": {
                "apiVersion": regarding["apiVersion"], "kind": regarding["kind"],
                "name": meta["name"], "namespace": ns, "uid": meta.get("uid"),
            },
            "type": type_, "reason": reason, "message": message[:1024],
            "source": {"component": component},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "reportingComponent": component, "reportingInstance": component,
        }
        self._call("POST", self.path("v1", "Event", ns), ev)

    def pod_log(self, namespace: str, name: str, container: str | None = None,
                previous: bool = False, tail_lines: int | None = None) -> str:
        """A container's log as text (GET pods/<name>/log)."""
        query: list[tuple[str, Any]] = []
        if container:
            query.append(("container", container))
        if previous:
            query.append(("previous", "true"))
        if tail_lines is not None:
            query.append(("tailLines", tail_lines))
        data = self._raw("GET", self.path("v1", "Pod", namespace, name, "log"), query,
                         accept="text/plain")
        return data.decode(errors="replace")

    def _raw(self, method: str, path: str, query: Sequence[tuple[str, Any]] = (),
             accept: str = "*/*") -> bytes:
        """A call whose answer is not JSON (logs): the body as bytes."""
        metrics.API_CALLS.labels(method, resource_of(path)).inc()
        try:
            m, url, hdrs, _, _ = self._api.param_serialize(
                method=method, resource_path=path, query_params=list(query),
                header_params={"Accept": accept}, auth_settings=["BearerToken"])
            resp = self._api.call_api(m, url, header_params=hdrs, _request_timeout=60)
            data = resp.read() or b""
        except ApiException as e:
            raise _error(e) from None
        except _UNREACHED as e:
            raise _unreached(method, path, e) from None
        if not 200 <= resp.status < 300:
            raise _error(ApiException(status=resp.status, reason=resp.reason,
                                      body=data.decode(errors="replace")))
        return cast(bytes, data)

    def serves(self, api_version: str) -> bool:
        """Whether the API server serves `api_version` (discovery: any authenticated
        user may read it, where reading a CRD needs a ClusterRole)."""
        try:
            self._call("GET", _base(api_version))
        except KubeError as e:
            if e.status == 404:
                return False
            raise
        return True

    def crd_exists(self, name: str) -> bool:
        return self.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name) is not None


def node_labels(name: str, timeout: float = 2) -> dict[str, str]:
    """The labels of Node `name`, read in-cluster with the pod's service account.

    For the runner, which knows its node only by name; raises when not in a cluster or
    when RBAC does not let the pod get Nodes.
    """
    cfg = client.Configuration()
    config.load_incluster_config(client_configuration=cfg)
    with client.ApiClient(cfg) as api:
        node = Kube(api, request_timeout=timeout).get("v1", "Node", name)
    if node is None:
        raise KubeError(404, "NotFound", f"node {name} does not exist")
    return dict(node.get("metadata", {}).get("labels") or {})


def _unreached(method: str, path: str, e: BaseException) -> KubeError:
    return KubeError(0, UNREACHED_REASON, f"the Kubernetes API could not be reached "
                     f"({method} {path.split('?', maxsplit=1)[0]}): {type(e).__name__}: {e}")


def _error(e: ApiException) -> KubeError:
    message = str(e.body or e.reason)
    reason = str(e.reason)
    try:
        body = json.loads(e.body or "{}")
        message = body.get("message", message)
        reason = body.get("reason", reason)
    except (TypeError, ValueError):
        pass
    return KubeError(int(e.status or 0), reason, message)


def user_namespace(kubeconfig: str | None = None, context: str | None = None) -> str:
    """The namespace kubectl would use: the context's, else the pod's own, else default."""
    try:
        contexts, current = config.list_kube_config_contexts(kubeconfig)
    except (config.ConfigException, OSError):
        try:
            with open(_SA_NAMESPACE) as f:
                return f.read().strip() or "default"
        except OSError:
            return "default"
    chosen = next((c for c in contexts or [] if c.get("name") == context), None) \
        if context else current
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


_SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def with_removals(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """`new` as a JSON merge patch over `old` (RFC 7386): null for each key of `old` that
    `new` lacks, at every level of objects both have; lists and values as in `new`."""
    out: dict[str, Any] = {k: None for k in old if k not in new}
    for k, v in new.items():
        was = old.get(k)
        out[k] = (with_removals(was, v) if isinstance(v, Mapping) and isinstance(was, Mapping)
                  else v)
    return out

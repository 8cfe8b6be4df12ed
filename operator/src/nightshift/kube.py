"""The only module that talks to the Kubernetes API (kopf's own watches aside).

Generic, dict-in dict-out calls on top of the official client's transport and config
loading (kubeconfig, in-cluster, EKS exec plugins): server-side apply, get, list,
delete, status patches and events. Resource paths come from a small table of the
kinds Nightshift touches, with API discovery as the fallback.
"""

from __future__ import annotations

import builtins
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client, config  # type: ignore[import-untyped]
from kubernetes.client.rest import ApiException  # type: ignore[import-untyped]

from nightshift.api import names
from nightshift.api.conditions import now_rfc3339

Obj = dict[str, Any]


class KubeError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


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
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"):
        Resource("customresourcedefinitions", False),
    ("karpenter.sh/v1", "NodePool"): Resource("nodepools", False),
    ("karpenter.sh/v1", "NodeClaim"): Resource("nodeclaims", False),
    ("karpenter.k8s.aws/v1", "EC2NodeClass"): Resource("ec2nodeclasses", False),
    ("karpenter.kwok.sh/v1alpha1", "KWOKNodeClass"): Resource("kwoknodeclasses", False),
    (names.API_VERSION, names.PIPELINERUN): Resource(names.PIPELINERUNS, True),
    (names.API_VERSION, names.VIRTUALCLUSTER): Resource(names.VIRTUALCLUSTERS, True),
    (names.API_VERSION, names.SHAREDSTORAGE): Resource(names.SHAREDSTORAGES, True),
}


def _base(api_version: str) -> str:
    return f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"


class Kube:
    def __init__(self, api_client: Any, field_manager: str = names.FIELD_MANAGER) -> None:
        self._api = api_client
        self.field_manager = field_manager
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
        # Pipelines fan out in bursts; keep enough connections for concurrent reconciles.
        cfg.connection_pool_maxsize = 8
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
                                      _request_timeout=60)
            data = resp.read()
        except ApiException as e:
            raise _error(e) from None
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
                     status: Mapping[str, Any], resource_version: str | None = None) -> Obj:
        """Replace .status with a merge patch (lists in status are replaced whole)."""
        patch: dict[str, Any] = {"status": dict(status)}
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

    def crd_exists(self, name: str) -> bool:
        return self.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name) is not None


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

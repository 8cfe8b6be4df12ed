"""Operator settings from the environment (the Helm chart sets them)."""

from __future__ import annotations

import ipaddress
import os
import re
import urllib.parse
from dataclasses import dataclass

ENV_S3_ENDPOINTS = "NIGHTSHIFT_S3_ENDPOINTS"
ENV_RUNNER_IMAGES = "NIGHTSHIFT_RUNNER_IMAGES"
ENV_S3_OPERATOR_IDENTITY = "NIGHTSHIFT_S3_OPERATOR_IDENTITY"
ENV_CLUSTER_CIDRS = "NIGHTSHIFT_CLUSTER_CIDRS"
ENV_STORAGE_IMAGE_REGISTRY = "NIGHTSHIFT_STORAGE_IMAGE_REGISTRY"
ENV_STORAGE_IMAGE_TAG = "NIGHTSHIFT_STORAGE_IMAGE_TAG"
_DEFAULT_PORTS = {"http": 80, "https": 443}
_HOST = re.compile(r"^(?:[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?|\[[0-9a-f:.]+\])$")
_PORT = re.compile(r"^[0-9]{1,5}$")
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off", "")


@dataclass(frozen=True)
class Endpoint:
    """An S3 endpoint URL reduced to what decides where a request goes."""

    scheme: str
    host: str
    port: int | None  # None: any port (allow-list entries written `host:*`)
    path: str

    def matches(self, other: Endpoint) -> bool:
        return ((self.scheme, self.host, self.path) == (other.scheme, other.host, other.path)
                and self.port in (None, other.port))


def _number(name: str, default: float, whole: bool = False) -> float:
    """A number setting (seconds; a port where `whole`); a bad one names its variable,
    and the operator exits on it."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    what = "a port number" if whole else "a number of seconds, without a unit"
    try:
        value = float(int(raw)) if whole else float(raw)
    except ValueError:
        raise ValueError(f"{name}: {raw!r} is not {what}") from None
    if not 0 <= value < float("inf"):
        raise ValueError(f"{name}: {raw!r} must be {what}, 0 or more")
    return value


def parse_endpoint(url: str, any_port: bool = False) -> Endpoint:
    """Parse strictly: what cannot be read one way only (user info, a query, an odd port)
    is refused, so the URL checked is the URL boto3 connects to."""
    parts = urllib.parse.urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise ValueError(f"{url!r} must start with http:// or https://")
    if parts.query or parts.fragment or "@" in parts.netloc or "\\" in url:
        raise ValueError(f"{url!r} must be scheme://host[:port][/path], nothing more")
    netloc = parts.netloc.lower()
    if netloc.startswith("["):
        host, _, rest = netloc.partition("]")
        host, port = host + "]", rest.removeprefix(":")
        if rest and not rest.startswith(":"):
            raise ValueError(f"{url!r}: cannot read the port")
    else:
        host, _, port = netloc.partition(":")
    if not _HOST.match(host):
        raise ValueError(f"{url!r}: {host!r} is not a host name or IP address")
    if port == "*" and any_port:
        number = None
    elif not port:
        number = _DEFAULT_PORTS[scheme]
    elif _PORT.match(port) and 0 < int(port) < 65536:
        number = int(port)
    else:
        raise ValueError(f"{url!r}: {port!r} is not a port")
    return Endpoint(scheme, host, number, parts.path.rstrip("/"))


def endpoint_allowed(endpoint: str, allowed: tuple[str, ...]) -> bool:
    try:
        want = parse_endpoint(endpoint)
    except ValueError:
        return False
    return any(parse_endpoint(a, any_port=True).matches(want) for a in allowed)


def _endpoints(raw: str) -> tuple[str, ...]:
    out = tuple(e.strip() for e in raw.split(",") if e.strip())
    for e in out:
        try:
            parse_endpoint(e, any_port=True)
        except ValueError as err:
            raise ValueError(f"{ENV_S3_ENDPOINTS}: {err} (a comma-separated list of "
                             "http[s]://host[:port|:*] URLs)") from None
    return out


def _cidrs(raw: str) -> tuple[str, ...]:
    out = tuple(c.strip() for c in raw.split(",") if c.strip())
    for c in out:
        try:
            ipaddress.ip_network(c, strict=True)
        except ValueError as err:
            raise ValueError(f"{ENV_CLUSTER_CIDRS}: {err} (a comma-separated list of "
                             "network addresses, e.g. 10.0.0.0/16,100.64.0.0/16)") from None
    return out


def _images(raw: str) -> tuple[str, ...]:
    out = tuple(i.strip() for i in raw.split(",") if i.strip())
    for i in out:
        if any(c.isspace() for c in i):
            raise ValueError(f"{ENV_RUNNER_IMAGES}: {i!r} is not an image reference (a "
                             "comma-separated list of images, e.g. "
                             "registry.example/nightshift-runner:1.2.3)")
    return out


def _flag(name: str, raw: str) -> bool:
    if raw.strip().lower() in _TRUE:
        return True
    if raw.strip().lower() in _FALSE:
        return False
    raise ValueError(f"{name}: {raw!r} is not true or false")


@dataclass(frozen=True)
class OperatorConfig:
    runner_image: str = "nightshift-runner:dev"
    # Runner images a run may name in spec.runnerImage besides runner_image (which is
    # always allowed). The runner holds the run's S3 credentials and, with the node
    # cache, writes the node's cache: an image of the tenant's choice would be trusted
    # code on the node. Empty: no run overrides the runner image. See docs/security.md.
    runner_images: tuple[str, ...] = ()
    # Coalescing: a pass runs at most this often per object, however many events arrive.
    min_pass_interval: float = 1.0
    # Progress-only status updates (counts moved, nothing else) are written at most this
    # often; phase and condition changes are written at once.
    progress_interval: float = 10.0
    # Level-based resync even when no event arrives.
    resync: float = 60.0
    # The KWOK provider's instance catalog (prices, families); "": none, so kwok pools
    # accept any family and have no prices (the status says so). On EKS prices come
    # from AWS instead.
    instance_catalog: str = ""
    # Prometheus /metrics port; 0 serves none.
    metrics_port: int = 0
    # S3 endpoints the operator may send requests to when it lists a stage's items
    # (fromS3); empty: AWS's own only (storages with no endpoint). An entry's port may be
    # `*`. See docs/security.md.
    s3_endpoints: tuple[str, ...] = ()
    # Whether a fromS3 listing without a credentials Secret may use the operator's own
    # identity (its service account's IAM role); otherwise such a listing is refused.
    s3_operator_identity: bool = False
    # The cluster's pod and node address ranges (the VPC's CIDRs on EKS): a cvmfs
    # SharedStorage's squids serve them when allowedCIDRs is empty, and allowedCIDRs
    # may not be wider. Empty: allowedCIDRs must be given, within private ranges.
    cluster_cidrs: tuple[str, ...] = ()
    # Where a SharedStorage's images (nightshift-squid, -nfs-ganesha, -gluster,
    # -cvmfs-client) come from: "<registry>/nightshift-squid:<tag>"; empty registry: the
    # node's own images (the local cluster), empty tag: as rendered (untagged).
    storage_image_registry: str = ""
    storage_image_tag: str = ""
    # How long a cvmfs storage's LoadBalancer Service may wait for its address before
    # the status says so (on EKS the AWS Load Balancer Controller gives one in seconds).
    load_balancer_grace: float = 120.0

    @classmethod
    def from_env(cls) -> OperatorConfig:
        return cls(
            runner_image=os.environ.get("NIGHTSHIFT_RUNNER_IMAGE", cls.runner_image),
            runner_images=_images(os.environ.get(ENV_RUNNER_IMAGES, "")),
            min_pass_interval=_number("NIGHTSHIFT_MIN_PASS_INTERVAL", cls.min_pass_interval),
            progress_interval=_number("NIGHTSHIFT_PROGRESS_INTERVAL", cls.progress_interval),
            resync=_number("NIGHTSHIFT_RESYNC", cls.resync),
            instance_catalog=os.environ.get("NIGHTSHIFT_INSTANCE_CATALOG", ""),
            metrics_port=int(_number("NIGHTSHIFT_METRICS_PORT", 0, whole=True)),
            s3_endpoints=_endpoints(os.environ.get(ENV_S3_ENDPOINTS, "")),
            s3_operator_identity=_flag(ENV_S3_OPERATOR_IDENTITY,
                                       os.environ.get(ENV_S3_OPERATOR_IDENTITY, "")),
            cluster_cidrs=_cidrs(os.environ.get(ENV_CLUSTER_CIDRS, "")),
            storage_image_registry=os.environ.get(ENV_STORAGE_IMAGE_REGISTRY, "").strip(),
            storage_image_tag=os.environ.get(ENV_STORAGE_IMAGE_TAG, "").strip(),
            load_balancer_grace=_number("NIGHTSHIFT_LB_GRACE", cls.load_balancer_grace),
        )

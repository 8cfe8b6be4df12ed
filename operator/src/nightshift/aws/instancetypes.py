"""The region's EC2 instance types as an InstanceCatalog (ec2:DescribeInstanceTypes).

On AWS the VirtualCluster validation checks pools' `families` and `instanceTypes`
against it, as it checks them against the KWOK catalog locally: a misspelled family
(`c6l`) or type (`c6i.humongous`) would otherwise render a NodePool that never launches
a node, under a Ready VirtualCluster.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from nightshift.aws import AwsError, aws_errors
from nightshift.virtualcluster.catalog import InstanceCatalog, InstanceType, family_of

log = logging.getLogger(__name__)

# EC2's architecture names, in the kubernetes spelling the catalog keeps.
ARCH = {"x86_64": "amd64", "arm64": "arm64"}
TTL_S = 24 * 3600  # a region gains types a few times a year
RETRY_S = 600  # after a failure: not every pass
FRESH_S = 300  # younger than this, a name it lacks is not a reason to read it again


def describe_catalog(ec2: Any) -> InstanceCatalog:
    """Every instance type EC2 offers in the client's region (about 900, 9 pages)."""
    types: dict[str, InstanceType] = {}
    with aws_errors("DescribeInstanceTypes"):
        for page in ec2.get_paginator("describe_instance_types").paginate():
            for t in page.get("InstanceTypes", []):
                name = str(t["InstanceType"])
                archs = [ARCH[a] for a in (t.get("ProcessorInfo") or {}).get(
                    "SupportedArchitectures", []) if a in ARCH]
                types[name] = InstanceType(
                    name=name, family=family_of(name), arch=archs[0] if archs else "amd64",
                    cpu=float((t.get("VCpuInfo") or {}).get("DefaultVCpus", 0)),
                    memory_bytes=int((t.get("MemoryInfo") or {}).get("SizeInMiB", 0)) * 2**20)
    return InstanceCatalog(types)


class CatalogCache:
    """describe_catalog, kept TTL_S; a failure is kept RETRY_S and said in `error`
    (validation then skips the names, as without a catalog)."""

    def __init__(self, client: Callable[[], Any],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._clock = clock
        self._catalog: InstanceCatalog | None = None
        self._until = 0.0
        self._read = 0.0
        self.error = ""

    def get(self, names: Iterable[str] = ()) -> InstanceCatalog | None:
        """The catalog; read again first when it is older than FRESH_S and lacks one of
        `names` (families or types): a family AWS launched since is not refused as a
        misspelling for a day."""
        now = self._clock()
        lacking = (self._catalog is not None and self._read + FRESH_S <= now
                   and _lacks(self._catalog, names))
        if now < self._until and not lacking:
            return self._catalog
        try:
            catalog = describe_catalog(self._client())
        except AwsError as e:
            self.error = (f"pools' families and instanceTypes not checked: {e}; grant the "
                          "operator's role ec2:DescribeInstanceTypes")
            log.warning("%s", self.error)
            self._until = now + RETRY_S
            return self._catalog  # the last one fetched, if any
        if not catalog.types:
            # An empty answer (a region without the API, a stub) is no catalog: checking
            # names against it would refuse every pool.
            self._until = now + RETRY_S
            return self._catalog
        self._catalog, self.error, self._until, self._read = catalog, "", now + TTL_S, now
        return catalog


def _lacks(catalog: InstanceCatalog, names: Iterable[str]) -> bool:
    """A type (with a dot) or family of `names` that `catalog` does not hold."""
    families = {t.family for t in catalog.types.values()}
    return any(n not in (catalog.types if "." in n else families) for n in names)

"""Instance types the seed studies ran on, for pools written `like: cc2.8xlarge`. Pure.

Most are long retired (c1, cc1, cc2, m1, m2) or outside the current-generation default
(c3, m3, r3). A pool `like` one gets its class's current generations at least as large:
at least as many vCPUs and as much memory, which is how the seeds' figures were bound
(a c1.xlarge's 8 cores, a cc2.8xlarge's 32 and 60.5 GiB). Figures from AWS's
previous-generation instance table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Legacy:
    class_: str
    vcpu: int
    memory_gib: float

    @property
    def memory_mib(self) -> int:
        return int(self.memory_gib * 1024)


LEGACY: Mapping[str, Legacy] = {
    "m1.small": Legacy("general", 1, 1.7),
    "m1.large": Legacy("general", 2, 7.5),
    "m1.xlarge": Legacy("general", 4, 15),
    "m3.medium": Legacy("general", 1, 3.75),
    "m3.large": Legacy("general", 2, 7.5),
    "m3.xlarge": Legacy("general", 4, 15),
    "m3.2xlarge": Legacy("general", 8, 30),
    "c1.medium": Legacy("compute", 2, 1.7),
    "c1.xlarge": Legacy("compute", 8, 7),
    "c3.large": Legacy("compute", 2, 3.75),
    "c3.xlarge": Legacy("compute", 4, 7.5),
    "c3.2xlarge": Legacy("compute", 8, 15),
    "c3.4xlarge": Legacy("compute", 16, 30),
    "c3.8xlarge": Legacy("compute", 32, 60),
    "c4.xlarge": Legacy("compute", 4, 7.5),
    "c4.2xlarge": Legacy("compute", 8, 15),
    "c4.4xlarge": Legacy("compute", 16, 30),
    "c4.8xlarge": Legacy("compute", 36, 60),
    "m2.2xlarge": Legacy("memory", 4, 34.2),
    "m2.4xlarge": Legacy("memory", 8, 68.4),
    "r3.xlarge": Legacy("memory", 4, 30.5),
    "r3.2xlarge": Legacy("memory", 8, 61),
    "r3.4xlarge": Legacy("memory", 16, 122),
    "r3.8xlarge": Legacy("memory", 32, 244),
    "cr1.8xlarge": Legacy("memory", 32, 244),
    "cc1.4xlarge": Legacy("cluster-compute", 16, 23),
    "cc2.8xlarge": Legacy("cluster-compute", 32, 60.5),
    "hi1.4xlarge": Legacy("storage", 16, 60.5),
    "hs1.8xlarge": Legacy("storage", 16, 117),
    "cg1.4xlarge": Legacy("gpu", 16, 22.5),
}

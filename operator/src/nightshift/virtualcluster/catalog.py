"""Instance classes and the instance-type catalog: pure data, no I/O.

A pool's `class` becomes Karpenter's `karpenter.k8s.aws/instance-category` on AWS. The
KWOK provider knows no categories (it labels only `karpenter.kwok.sh/instance-family`,
size, cpu and memory), so there the class is turned into the catalog's families of
those categories.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# Karpenter's own parse (karpenter-provider-aws pkg/providers/instancetype/types.go):
# category = the leading letters, generation = the digits after an optional "-Ntb".
_TYPE_SCHEME = re.compile(r"^([a-z]+)(-[0-9]+tb)?([0-9]+)(.*)$")

# Categories per class. Memory leaves out "u" (the multi-TB high-memory hosts, priced
# far above what a batch pool should ever pick by accident).
CLASS_CATEGORIES: Mapping[str, tuple[str, ...]] = {
    "compute": ("c",),
    "memory": ("r", "x", "z"),
    "general": ("m",),
    "storage": ("i", "d", "im", "is"),
    "cluster-compute": ("c", "hpc"),
    "gpu": ("g", "p"),
}

# Oldest generations leave a class unless the user names families: older types are
# cheap on spot but slow, and lack ENA/NVMe. Storage and GPU keep older generations
# because i3/d3 and g4dn are still the current offer in their line.
CLASS_MIN_GENERATION: Mapping[str, int] = {
    "compute": 5,
    "memory": 5,
    "general": 5,
    "storage": 3,
    "cluster-compute": 5,
    "gpu": 4,
}

# Arch spelling in the KWOK catalog (EC2's DescribeInstanceTypes names), which KWOK's
# Karpenter copies verbatim into kubernetes.io/arch.
KWOK_ARCH = {"amd64": "x86_64", "arm64": "arm64"}


def split_family(family: str) -> tuple[str, int] | None:
    """(category, generation) of a family such as "r6id" or "u-6tb1"; None if unparsable."""
    m = _TYPE_SCHEME.match(family)
    if not m:
        return None
    return m.group(1), int(m.group(3))


def family_of(instance_type: str) -> str:
    return instance_type.split(".", 1)[0]


def category_of(family: str) -> str | None:
    parsed = split_family(family)
    return parsed[0] if parsed else None


def family_fits_class(family: str, class_: str) -> bool:
    return category_of(family) in CLASS_CATEGORIES.get(class_, ())


def has_local_nvme(family: str) -> bool:
    """Families with instance-store NVMe: storage categories, or a "d" in the suffix."""
    m = _TYPE_SCHEME.match(family)
    if not m:
        return False
    return m.group(1) in ("i", "d", "im", "is") or "d" in m.group(4).split("-")[0]


def is_graviton(family: str) -> bool:
    """AWS names Arm families with a "g" in the suffix (c7g, m6gd, im4gn, x2gd)."""
    m = _TYPE_SCHEME.match(family)
    if not m:
        return False
    return "g" in m.group(4).split("-")[0]


@dataclass(frozen=True)
class InstanceType:
    name: str
    family: str
    arch: str  # kubernetes spelling: amd64 | arm64
    cpu: float
    memory_bytes: int
    # Lowest price per capacity type over the zones, USD/hour.
    prices: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class InstanceCatalog:
    types: Mapping[str, InstanceType]

    def families(self) -> list[str]:
        return sorted({t.family for t in self.types.values()})

    def families_for_class(self, class_: str, *, local_nvme: bool = False) -> list[str]:
        cats = CLASS_CATEGORIES.get(class_, ())
        min_gen = CLASS_MIN_GENERATION.get(class_, 0)
        out = []
        for fam in self.families():
            parsed = split_family(fam)
            if parsed is None or parsed[0] not in cats or parsed[1] < min_gen:
                continue
            if local_nvme and not has_local_nvme(fam):
                continue
            out.append(fam)
        return out

    def price(self, instance_type: str, capacity_type: str) -> float | None:
        t = self.types.get(instance_type)
        return t.prices.get(capacity_type) if t else None


_UNITS = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
    "E": 1e18,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([A-Za-z]*)$")


def parse_quantity(q: str | float | int) -> float:
    """A Kubernetes resource quantity ("3920m", "15Gi", "1.5") as a float."""
    if isinstance(q, int | float):
        return float(q)
    m = _QUANTITY.match(q.strip())
    if not m or (m.group(2) and m.group(2) not in _UNITS):
        raise ValueError(f"not a resource quantity: {q!r}")
    return float(m.group(1)) * _UNITS.get(m.group(2), 1)


def parse_kwok_catalog(entries: Iterable[Mapping[str, Any]]) -> InstanceCatalog:
    """The KWOK provider's instance_types.json: a list of {name, offerings, architecture,
    operatingSystems, resources}. Each type appears once per OS; Linux entries win."""
    types: dict[str, InstanceType] = {}
    for e in entries:
        name = str(e["name"])
        if name in types and "linux" not in e.get("operatingSystems", []):
            continue
        prices: dict[str, float] = {}
        for off in e.get("offerings", []):
            for cap in _capacity_types(off.get("Requirements", [])):
                price = float(off["Price"])
                prices[cap] = min(prices.get(cap, price), price)
        res = e.get("resources", {})
        arch = {"x86_64": "amd64", "arm64": "arm64"}.get(str(e.get("architecture")), "other")
        types[name] = InstanceType(
            name=name,
            family=family_of(name),
            arch=arch,
            cpu=parse_quantity(res.get("cpu", 0)),
            memory_bytes=int(parse_quantity(res.get("memory", 0))),
            prices=prices,
        )
    return InstanceCatalog(types=types)


def _capacity_types(reqs: Sequence[Mapping[str, Any]]) -> list[str]:
    for r in reqs:
        if r.get("key") == "karpenter.sh/capacity-type":
            return [str(v) for v in r.get("values", [])]
    return []


def kwok_family(family: str) -> str:
    """KWOK's family label: the name up to the first "." or "-" ("c7i-flex" -> "c7i")."""
    return re.split(r"[.-]", family, maxsplit=1)[0]


# Families per class in the KWOK example catalog (karpenter v1.14.1
# kwok/examples/aws_instance_types.json), used when no catalog is passed so that the
# rendering stays pure and the golden files do not depend on a file on disk.
DEFAULT_KWOK_FAMILIES: Mapping[str, tuple[str, ...]] = {
    "compute": (
        "c5", "c5a", "c5ad", "c5d", "c5n", "c6a", "c6g", "c6gd", "c6gn", "c6i", "c6id",
        "c6in", "c7a", "c7g", "c7gd", "c7gn", "c7i", "c8g",
    ),
    "memory": (
        "r5", "r5a", "r5ad", "r5b", "r5d", "r5dn", "r5n", "r6a", "r6g", "r6gd", "r6i",
        "r6id", "r6idn", "r6in", "r7a", "r7g", "r7gd", "r7i", "r7iz", "r8g", "x8g",
    ),
    "general": (
        "m5", "m5a", "m5ad", "m5d", "m5dn", "m5n", "m5zn", "m6a", "m6g", "m6gd", "m6i",
        "m6id", "m6idn", "m6in", "m7a", "m7g", "m7gd", "m7i", "m8g",
    ),
    "storage": ("d3", "d3en", "i3", "i3en", "i4g", "i4i", "i7ie", "i8g", "im4gn", "is4gen"),
    "cluster-compute": (
        "c5", "c5a", "c5ad", "c5d", "c5n", "c6a", "c6g", "c6gd", "c6gn", "c6i", "c6id",
        "c6in", "c7a", "c7g", "c7gd", "c7gn", "c7i", "c8g",
    ),
    "gpu": ("g4ad", "g4dn", "g5", "g5g", "g6", "g6e", "p4d", "p5"),
}


def kwok_families_for(
    class_: str, catalog: InstanceCatalog | None, *, local_nvme: bool = False
) -> list[str]:
    if catalog is not None:
        fams = catalog.families_for_class(class_, local_nvme=local_nvme)
    else:
        fams = [
            f for f in DEFAULT_KWOK_FAMILIES.get(class_, ()) if not local_nvme or has_local_nvme(f)
        ]
    return sorted({kwok_family(f) for f in fams})

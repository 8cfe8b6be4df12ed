"""Drift (api/drift.py) against the API server's own objects: every object the
VirtualCluster and SharedStorage renderers make, server-side applied as the operator
applies them (its field manager; a dry run, so no NodePool reaches Karpenter), is not
drift as the server returns it (its defaults and its managedFields format), and the
same object with one field fewer is: a server-side apply of that render removes the
field, which comparing the rendered fields alone never asked for."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from nightshift.api import names
from nightshift.api.drift import applied_paths, drifted, rendered_paths
from nightshift.sharedstorage.render import render_storage
from nightshift.virtualcluster.nodepools import render_virtualcluster
from nightshift.virtualcluster.spec import VirtualClusterSpec
from nightshift.virtualcluster.validate import validate
from tests.bad_sharedstorages import FACTS, GOOD
from tests.clusterutil import ROOT, Kubectl

VC_EXAMPLES = sorted((ROOT / "examples").glob("virtualcluster-*.yaml"))


def served(kubectl: Kubectl, rendered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the server would hold after the operator's apply of `rendered`, in order."""
    r = kubectl("apply", "--server-side", "--dry-run=server",
                f"--field-manager={names.FIELD_MANAGER}", "-o", "json", "--show-managed-fields",
                "-f", "-",
                input_=yaml.safe_dump_all(rendered), check=False)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    items = out["items"] if out.get("kind") == "List" else [out]
    assert len(items) == len(rendered)
    return list(items)


def one_field_fewer(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` without one of the labels its pods or nodes get (a map's key, as a removed
    pool label or storage label would be)."""
    fewer = copy.deepcopy(obj)
    spec = fewer.get("spec") or {}
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or fewer["metadata"]["labels"]
    labels["test.nightshift.io/removed"] = "x"  # added to the served copy's render below
    return fewer


def check(kubectl: Kubectl, rendered: list[dict[str, Any]]) -> None:
    for want, have in zip(rendered, served(kubectl, rendered), strict=True):
        where = f"{want['kind']}/{want['metadata']['name']}"
        assert not drifted(want, have), (f"{where}: drift in the server's own copy: "
                                         f"{applied_paths(have) - rendered_paths(want)}")
    # A render with one more label, as served; then the render without it: drift.
    more = [one_field_fewer(m) for m in rendered]
    for want, have in zip(rendered, served(kubectl, more), strict=True):
        where = f"{want['kind']}/{want['metadata']['name']}"
        assert drifted(want, have), f"{where}: a label we no longer render is not drift"


@pytest.mark.parametrize("example", VC_EXAMPLES, ids=[p.stem for p in VC_EXAMPLES])
@pytest.mark.parametrize("provider", ["aws", "kwok"])
def test_virtualcluster_objects(kubectl: Kubectl, namespace: str, example: Path,
                                provider: str) -> None:
    from nightshift.aws.prices import load_kwok_catalog
    from nightshift_localcluster.paths import Layout

    vc = yaml.safe_load(example.read_text())
    vc["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()))
    catalog = load_kwok_catalog(Layout.discover().instance_types_file)
    if validate(VirtualClusterSpec.model_validate(vc["spec"]), provider,
                catalog if provider == "kwok" else None):
        pytest.skip("not valid for this provider (test_virtualcluster.py says which)")
    check(kubectl, render_virtualcluster(vc, provider,  # type: ignore[arg-type]
                                         catalog=catalog if provider == "kwok" else None))


# A size the API server stores in another form (canonical: "1536Gi"): the same value.
UNCANONICAL = copy.deepcopy(GOOD["nfs-dedicated"])
UNCANONICAL["spec"]["nfs"]["backing"]["pvc"]["size"] = "1.5Ti"
CASES = {**{c: o for c, o in GOOD.items() if o["spec"]["type"] != "s3"},
         "nfs-size-1.5Ti": UNCANONICAL}


@pytest.mark.parametrize("case", sorted(CASES))
def test_sharedstorage_objects(kubectl: Kubectl, namespace: str, case: str) -> None:
    obj = copy.deepcopy(CASES[case])
    obj["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()))
    rendered = render_storage(obj, platform="aws", squid_cidrs=FACTS.cluster_cidrs)
    for m in rendered:
        for ref in m["metadata"].get("ownerReferences") or []:
            # The garbage collector would act on an owner that is not there; a dry run
            # stores nothing, but the owner must still be a well-formed reference.
            ref["uid"] = obj["metadata"]["uid"]
    check(kubectl, rendered)

"""The operator's item resolution (itemsource.resolve_and_freeze) freezes a matrix stage's
items, as it does items and range: without it a matrix run stays Pending with
`ItemsUnresolved ... no item source` (seen with examples/broadband on the local cluster)."""

from __future__ import annotations

from typing import cast

from nightshift.api import names
from nightshift.kube import Kube
from nightshift.pipelinerun.itemsource import resolve_and_freeze
from tests.bad_pipelineruns import run, stage
from tests.unit.test_s3_deputy import FakeKube


def test_a_matrix_stage_is_resolved_and_frozen_in_field_name_order() -> None:
    m = run([stage("seismograms", forEach={"matrix": {
        "source": ["northridge", "landers"], "site": ["lax", "pas", "usc"]}})])
    m["metadata"]["uid"] = "u1"
    kube = FakeKube()
    resolve_and_freeze(cast(Kube, kube), m, "seismograms")
    [cm] = kube.applied
    assert str(cm["data"][names.ITEMS_KEY]).splitlines() == [
        "lax/northridge", "lax/landers", "pas/northridge", "pas/landers",
        "usc/northridge", "usc/landers"]

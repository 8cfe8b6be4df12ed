"""The other half of the seed examples' simulations (see test_examples.py): a file of its
own so that pytest-xdist runs it beside the first half."""

from __future__ import annotations

import pytest

from nightshift.kube import Kube
from tests.clusterutil import Kubectl
from tests.examplesutil import SEEDS
from tests.integration.conftest import OperatorProcess
from tests.integration.test_examples import SEEDS_HERE, check_example, kwok_pools
from tests.s3server import VersityGW, s3server

__all__ = ["kwok_pools", "s3server"]  # fixtures, used by name below


def test_every_seed_is_simulated_in_one_of_the_two_files() -> None:
    assert set(SEEDS_HERE) <= set(SEEDS)


@pytest.mark.parametrize("name", [s for s in SEEDS if s not in SEEDS_HERE])
def test_example_simulation_succeeds_with_its_item_counts(
        name: str, kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        kwok_pools: dict[str, str], s3server: VersityGW) -> None:
    check_example(name, kube, kubectl, namespace, kwok_pools, s3server)

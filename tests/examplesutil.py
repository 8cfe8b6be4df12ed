"""examples/simulate_examples.py as a module (examples/ is not a package), for the unit and
integration tests of the seed examples."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.clusterutil import ROOT

EXAMPLES = ROOT / "examples"


def simulate_examples() -> ModuleType:
    name = "nightshift_simulate_examples"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / "simulate_examples.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    # dataclasses look their module up in sys.modules while the class is made.
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


SEEDS = [p.name for p in simulate_examples().example_dirs(EXAMPLES)]

"""Running simulations on a cluster with Karpenter's KWOK provider: the I/O.

Each variant runs alone, in its own namespace, with its own VirtualCluster, so its nodes
are its own and Karpenter packs its pods from scratch: the namespace, the
VirtualCluster, then the run; a poll every second reads the run (its status is a few
KB), the VirtualCluster's NodeClaims (by label: O(nodes)) and the VirtualCluster
(prices). Spot interruptions delete spot NodeClaims at the model's rate, which is what
Karpenter does on an EC2 interruption notice: it drains the node, and the stage Job's
podFailurePolicy retries the evicted items without counting them as failures. At the
end the run and VirtualCluster are deleted and the simulation waits for the nodes to go,
so the next variant starts on an empty test bed.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from nightshift.api import names
from nightshift.aws.prices import PriceFn, catalog_prices, load_kwok_catalog
from nightshift.kube import Kube
from nightshift.simulate import convert
from nightshift.simulate.model import Model
from nightshift.simulate.report import (
    Node,
    Outcome,
    Result,
    result,
    run_items,
    stage_seconds,
)
from nightshift.virtualcluster.cost import billable

NODECLAIM = ("karpenter.sh/v1", "NodeClaim")
TERMINAL = ("Succeeded", "Failed", "Cancelled")
POLL_SECONDS = 1.0
UNRECONCILED_SECONDS = 60.0
DRAIN_TIMEOUT = 300.0


def dns_label(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:20] or "v"


@dataclass
class Simulation:
    """One simulated run of one variant: converted manifests and what was observed."""
    variant: str
    vc: dict[str, Any]
    run: dict[str, Any]
    model: Model
    nodes: dict[str, Node] = field(default_factory=dict)
    interruptions: int = 0

    @property
    def namespace(self) -> str:
        return str(self.run["metadata"]["namespace"])

    @property
    def selector(self) -> str:
        return (f"{names.LABEL_VIRTUAL_CLUSTER}={self.vc['metadata']['name']},"
                f"{names.LABEL_VIRTUAL_CLUSTER_NAMESPACE}={self.namespace}")


class OperatorProcess:
    """`nightshift operator` as a child process watching only the simulations' namespaces."""

    def __init__(self, namespace_glob: str) -> None:
        self.log = Path(tempfile.mkstemp(prefix="nightshift-simulate-", suffix=".log")[1])
        env = {**os.environ, "NIGHTSHIFT_PROGRESS_INTERVAL": "1"}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(  # noqa: S603  (our own interpreter and module)
                [sys.executable, "-m", "nightshift.cli.main", "operator", "--health-port",
                 "0", "--namespace", namespace_glob],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def check(self) -> None:
        if self.proc.poll() is not None:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-15:])
            raise RuntimeError(f"the operator stopped (exit {self.proc.returncode}); its log "
                               f"{self.log} ends:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def prices_from_env() -> PriceFn | None:
    path = os.environ.get("NIGHTSHIFT_INSTANCE_CATALOG")
    return catalog_prices(load_kwok_catalog(path)) if path else None


class Runner:
    def __init__(self, kube: Kube, model: Model, err: Console, *,
                 timeout: float, prices: PriceFn | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.kube, self.model, self.err = kube, model, err
        self.timeout, self.prices, self.clock = timeout, prices, clock
        self.rng = random.Random(model.seed)  # noqa: S311  (reproducible, not a secret)
        self.session = uuid.uuid4().hex[:4]

    @property
    def namespace_glob(self) -> str:
        return f"sim-{self.session}-*"

    def preflight(self) -> None:
        """What the simulation needs on the cluster, said with the fix when missing."""
        from nightshift.kube import KubeError

        for crd in (f"pipelineruns.{names.GROUP}", f"virtualclusters.{names.GROUP}"):
            if not self.kube.crd_exists(crd):
                raise KubeError(404, "NoCRD", f"the cluster has no {crd} CRD: install "
                                "Nightshift's CRDs (`kubectl apply -f crds/`, or `helm "
                                "install` the nightshift chart)")
        if not self.kube.crd_exists("kwoknodeclasses.karpenter.kwok.sh"):
            raise KubeError(404, "NoKWOK", "the cluster has no Karpenter KWOK provider "
                            "(kwoknodeclasses.karpenter.kwok.sh): simulate on the local "
                            "cluster (`nightshift-localcluster up`, docs/local-cluster.md) "
                            "or a kind cluster with it (docs/kind.md)")

    def prepare(self, variant: str, vc: Mapping[str, Any], run: Mapping[str, Any],
                patch: Mapping[str, Any] | None) -> Simulation:
        ns = f"sim-{self.session}-{dns_label(variant)}"
        rate = (patch or {}).get("spotInterruptionsPerHour")
        m = self.model if rate is None else dataclasses.replace(
            self.model, spot_interruptions_per_hour=float(rate))
        return Simulation(variant, convert.virtual_cluster(vc, m, ns, patch),
                          convert.pipeline_run(run, m, ns, patch), m)

    def simulate(self, sim: Simulation, check: Callable[[], None] = lambda: None) -> Result:
        ns = sim.namespace
        self.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": ns, "labels": {convert.LABEL_SIMULATION: ns}}})
        try:
            self.kube.apply(sim.vc)
            created = self.clock()
            self.kube.apply(sim.run)
            outcome = self._watch(sim, created, check)
        finally:
            self._clean(sim, check)
        return result(outcome, sim.model, self.clock())

    def _watch(self, sim: Simulation, created: float, check: Callable[[], None]) -> Outcome:
        out = Outcome(sim.variant, created)
        name = sim.run["metadata"]["name"]
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[info]}"), console=self.err,
                      transient=False) as bar:
            task = bar.add_task(f"{sim.variant:>14}", total=None, info="starting")
            last = self.clock()
            while True:
                check()
                now = self.clock()
                run = self.kube.get(names.API_VERSION, names.PIPELINERUN, name, sim.namespace)
                status = (run or {}).get("status") or {}
                self._observe_nodes(sim, now)
                self._interrupt(sim, now - last)
                last = now
                out.phase = str(status.get("phase") or "Pending")
                out.items = run_items(status)
                out.run_cost = status.get("cost") or {}
                hours = sim.model.modelled(now - created) / 3600.0
                open_nodes = sum(1 for n in sim.nodes.values() if n.gone is None)
                bar.update(task, total=out.items["total"] or None,
                           completed=out.items["succeeded"] + out.items["failed"],
                           info=f"{out.phase}, {hours:.1f} h modelled, {open_nodes} nodes")
                if out.phase in TERMINAL:
                    out.finished = _epoch(status.get("completionTime")) or now
                    out.stage_seconds = stage_seconds(status, _epoch)
                    break
                if now - created > self.timeout:
                    out.phase = f"TimedOut ({_why(status)})"
                    break
                if not status and now - created > UNRECONCILED_SECONDS:
                    # An operator writes a run's status within a pass: nothing after a
                    # minute means none watches this namespace (--use-running-operator
                    # with none running), not a slow run.
                    out.phase = (f"NotReconciled (no operator wrote the run's status in "
                                 f"{UNRECONCILED_SECONDS:g} s: is one running, watching "
                                 f"namespace {sim.namespace}? Without "
                                 "--use-running-operator the command starts its own)")
                    break
                time.sleep(POLL_SECONDS)
        out.nodes = list(sim.nodes.values())
        out.interruptions = sim.interruptions
        return out

    def _observe_nodes(self, sim: Simulation, now: float) -> None:
        claims = self.kube.list(*NODECLAIM, label_selector=sim.selector)
        vc = self.kube.get(names.API_VERSION, "VirtualCluster", sim.vc["metadata"]["name"],
                           sim.namespace)
        priced = {str(o.get("name")): o.get("hourlyUSD") for o in
                  ((vc or {}).get("status") or {}).get("cost", {}).get("open") or []}
        seen = set()
        for c in claims:
            entry = billable(c)
            if entry is None:
                continue
            n = sim.nodes.get(entry["name"])
            if n is None:
                n = sim.nodes[entry["name"]] = Node(
                    entry["name"], entry["pool"], entry["instanceType"],
                    entry["capacityType"], _epoch(entry["since"]) or now)
            seen.add(n.name)
            n.registered = n.registered or _condition(c, "Registered")
            if n.hourly_usd is None:
                n.hourly_usd = priced.get(n.name)
            if self.prices is not None:
                if n.hourly_usd is None:
                    n.hourly_usd = self.prices(n.instance_type, n.capacity_type)
                if n.on_demand_usd is None:
                    n.on_demand_usd = self.prices(n.instance_type, "on-demand")
            if n.gone is None and c["metadata"].get("deletionTimestamp") and not n.interrupted:
                n.gone = _epoch(c["metadata"]["deletionTimestamp"]) or now
        for n in sim.nodes.values():
            if n.name not in seen and n.gone is None:
                n.gone = now

    def _interrupt(self, sim: Simulation, real_dt: float) -> None:
        rate = sim.model.spot_interruptions_per_hour
        if rate <= 0:
            return
        p = 1.0 - math.exp(-rate * sim.model.modelled(real_dt) / 3600.0)
        for n in list(sim.nodes.values()):
            # A NodeClaim deleted before its node registers leaves that Node behind on
            # the KWOK provider (it creates the Node after the registration delay
            # regardless), and EC2 interrupts running instances: only registered ones.
            if (n.gone is None and n.registered and n.capacity_type == "spot"
                    and self.rng.random() < p):
                self.kube.delete(*NODECLAIM, n.name)
                n.interrupted = True
                n.gone = self.clock()
                sim.interruptions += 1

    def _clean(self, sim: Simulation, check: Callable[[], None]) -> None:
        """Delete the run and the VirtualCluster and wait until their nodes are gone."""
        self.kube.delete(names.API_VERSION, names.PIPELINERUN, sim.run["metadata"]["name"],
                         sim.namespace)
        self.kube.delete(names.API_VERSION, "VirtualCluster", sim.vc["metadata"]["name"],
                         sim.namespace)
        # The VirtualCluster goes only once the operator has removed its NodePools and
        # node classes (a finalizer): the operator must outlive this wait, and the
        # namespace is deleted after it, or its deletion would hang on that finalizer.
        deadline = self.clock() + DRAIN_TIMEOUT
        with self.err.status(f"{sim.variant}: waiting for its nodes and pools to go"):
            while (self.kube.list(*NODECLAIM, label_selector=sim.selector)
                   or self.kube.get(names.API_VERSION, "VirtualCluster",
                                    sim.vc["metadata"]["name"], sim.namespace)):
                if self.clock() > deadline:
                    self.err.print(f"{sim.variant}: the VirtualCluster or its NodeClaims "
                                   f"({sim.selector}) are still there after "
                                   f"{DRAIN_TIMEOUT:.0f} s; `kubectl describe` them.",
                                   markup=False, style="yellow")
                    return
                check()
                time.sleep(POLL_SECONDS)
        self.kube.delete("v1", "Namespace", sim.namespace)


def _epoch(ts: Any) -> float | None:
    from nightshift.api.conditions import parse_rfc3339

    t = parse_rfc3339(str(ts)) if ts else None
    return t.timestamp() if t else None


def _condition(obj: Mapping[str, Any], type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _why(status: Mapping[str, Any]) -> str:
    """The run's Ready condition message: what it was waiting for."""
    for c in status.get("conditions") or []:
        if c.get("type") == "Ready" and c.get("status") != "True":
            return str(c.get("message") or c.get("reason") or "no message")[:120]
    return "no condition"

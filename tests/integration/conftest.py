"""Integration fixtures: a cluster (KUBECONFIG, or the local cluster brought up once),
the Nightshift CRDs, the operator as a subprocess, and a fresh namespace per test.

Set KUBECONFIG to run the same suite against kind or EKS; otherwise the local cluster
is started for the session (and stopped after, unless it was already up or
NIGHTSHIFT_KEEP_CLUSTER=1).
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nightshift.kube import Kube
from tests.clusterutil import ROOT, Kubectl, wait_for
from tests.integration.clusterdigest import karpenter_log_digest
from tests.integration.prutil import kwok_node_pool

# Each pytest session gets its own namespace prefix and its operator watches only that
# glob, so concurrent sessions on one cluster never reconcile each other's objects (a
# restart test must not pass because a second operator carried on).
SESSION = uuid.uuid4().hex[:4]
NAMESPACE_GLOB = f"t-{SESSION}-*"


# The files that take longest, longest first (wall seconds of each file's tests, measured
# on the local cluster with eight workers, 2026-11-30: 296 s for test_pipelinerun_stalled
# down to 65).
# With --dist loadfile a file runs on one worker, so a long file dispatched last is the
# suite's tail; hack/integration.sh passes --no-loadscope-reorder so xdist keeps this
# order instead of sorting files by their number of tests. Only the order changes:
# files not listed follow, as collected, and each file's tests keep their own order.
# test_simulate.py early for its spread (65-235 s in one session's CI runs), not its median.
LONG_FILES_FIRST = (
    "test_install.py", "test_pipelinerun_stalled.py", "test_pipelinerun.py",
    "test_examples.py", "test_simulate.py", "test_mpi.py", "test_examples_more.py",
    "test_gluster_real.py", "test_items_real.py", "test_sharedstorage_not_ready.py",
    "test_virtualcluster.py", "test_cost.py", "test_debian_base.py",
    "test_pipelinerun_validation.py", "test_sharedstorage_nfs.py",
    "test_validate_parity.py", "test_faults.py", "test_pipelinerun_final.py",
    "test_virtualcluster_lifecycle.py", "test_pipelinerun_operations.py",
    "test_runner_s3.py", "test_sharedstorage.py", "test_pipelinerun_evicted.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONG_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


# Each file's wall seconds (its tests' set-up, call and tear-down, module fixtures
# included), summed where the reports arrive: under xdist, the controller. A file runs
# on one worker, so the longest is the floor under the parallel phase, and this is what
# keeps LONG_FILES_FIRST's order true.
FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    FILE_SECONDS[path] = FILE_SECONDS.get(path, 0.0) + report.duration
    _tail_begins(path)


# The parallel phase's tail: once every file has started, no file is left to hand out,
# and each worker idles as its last file ends. hack/integration.sh starts the kind e2e
# subset then (it waits for this file, NIGHTSHIFT_TAIL_MARKER), on the cores the idle
# workers leave, instead of after the phase, where it had run 40 to 57 s past the
# disruptive tests beside it. Counted where the reports arrive (under xdist, the
# controller), from the files the workers collected.
TAIL_MARKER = os.environ.get("NIGHTSHIFT_TAIL_MARKER")
FILES_COLLECTED: set[str] = set()
FILES_STARTED: set[str] = set()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    FILES_COLLECTED.update(i.split("::", 1)[0] for i in ids)


def pytest_collection_finish(session: pytest.Session) -> None:
    # Without xdist the session collects here; under it the controller collects nothing
    # and the workers (workerinput) leave the counting to it.
    if not hasattr(session.config, "workerinput"):
        FILES_COLLECTED.update(item.nodeid.split("::", 1)[0] for item in session.items)


def _tail_begins(path: str) -> None:
    if not TAIL_MARKER or not FILES_COLLECTED or path in FILES_STARTED:
        return
    FILES_STARTED.add(path)
    if FILES_STARTED >= FILES_COLLECTED:
        Path(TAIL_MARKER).touch()


SESSION_START = datetime.now(UTC)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            exitstatus: int) -> None:
    if FILE_SECONDS:
        terminalreporter.section("longest files (wall seconds on their worker)")
        for path, seconds in sorted(FILE_SECONDS.items(), key=lambda kv: -kv[1])[:15]:
            terminalreporter.write_line(f"{seconds:8.1f}s {path}")
    if exitstatus == pytest.ExitCode.TESTS_FAILED:
        _karpenter_section(terminalreporter)


def _karpenter_section(terminalreporter: pytest.TerminalReporter) -> None:
    """On a failure with the local cluster: what its Karpenter did (clusterdigest.py)."""
    from nightshift_localcluster.paths import Layout, LocalClusterError

    try:
        log = Layout.discover().logs / "karpenter.log"
    except LocalClusterError:
        return
    lines = karpenter_log_digest(log, SESSION_START)
    if lines:
        terminalreporter.section("the local cluster's Karpenter during this session")
        for line in lines:
            terminalreporter.write_line(line)


@dataclass(frozen=True)
class Cluster:
    kubeconfig: str
    # Identity for the operator: its own user on the local cluster, so the audit log
    # can attribute its writes; the same kubeconfig elsewhere.
    operator_kubeconfig: str
    local: bool
    # The KWOK provider's instance-type file, handed to the operator as
    # NIGHTSHIFT_INSTANCE_CATALOG (its only way to find one); "" leaves it unset.
    instance_catalog: str = ""

    def operator_env(self) -> dict[str, str]:
        env = {"KUBECONFIG": self.operator_kubeconfig}
        if self.instance_catalog:
            env["NIGHTSHIFT_INSTANCE_CATALOG"] = self.instance_catalog
        return env


def external_instance_catalog() -> str:
    """For a cluster we did not start: NIGHTSHIFT_INSTANCE_CATALOG if set, else the test
    bed's copy when it was built (a cluster running Karpenter's KWOK provider on the
    upstream example file has the same Linux types and prices)."""
    if os.environ.get("NIGHTSHIFT_INSTANCE_CATALOG"):
        return os.environ["NIGHTSHIFT_INSTANCE_CATALOG"]
    from nightshift_localcluster.paths import Layout, LocalClusterError

    try:
        path = Layout.discover().instance_types_file
    except LocalClusterError:
        return ""
    return str(path) if path.exists() else ""


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    external = os.environ.get("KUBECONFIG")
    if external and not os.environ.get("NIGHTSHIFT_FORCE_LOCAL"):
        yield Cluster(external, external, local=False,
                      instance_catalog=external_instance_catalog())
        return
    from nightshift_localcluster import cluster as lc
    from nightshift_localcluster.components import Qps
    from nightshift_localcluster.paths import Layout

    layout = Layout.discover()
    state, alive, dead = lc.running(layout)
    was_up = state is not None and bool(alive) and not dead
    if os.environ.get("PYTEST_XDIST_WORKER") and not was_up:
        # Workers would race to start it, and the first to finish would stop it under
        # the others.
        pytest.exit("with pytest -n, start the local cluster first: `make cluster-up` "
                    "(hack/integration.sh does)", returncode=2)
    lc.up(layout, Qps(), lambda m: print(f"localcluster: {m}", file=sys.stderr))
    try:
        yield Cluster(str(layout.kubeconfig), str(layout.operator_kubeconfig), local=True,
                      instance_catalog=str(layout.instance_types_file))
    finally:
        if not was_up and not os.environ.get("NIGHTSHIFT_KEEP_CLUSTER"):
            lc.down(layout, lambda m: None)


@pytest.fixture(scope="session")
def kubectl(cluster: Cluster) -> Kubectl:
    return Kubectl(cluster.kubeconfig)


@pytest.fixture(scope="session")
def kube(kubectl: Kubectl) -> Kube:
    """The tests' in-process client: kubectl's own (field manager nightshift-tests, so
    what a test applies is never taken for the operator's)."""
    return kubectl.kube


@pytest.fixture(scope="session")
def crds(kubectl: Kubectl) -> list[str]:
    files = sorted((ROOT / "crds").glob("*.yaml"))
    names = []
    for f in files:
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(f))
        names.append(kubectl("get", "-f", str(f), "-o", "name").stdout.strip())

    # Not `kubectl wait --for=condition=Established`: it fails at once on a CRD whose
    # status has no conditions yet (localcluster's wait_established says more).
    from nightshift_localcluster.cluster import established_now

    def established(n: str) -> bool:
        return established_now(kubectl.kube.get(
            "apiextensions.k8s.io/v1", "CustomResourceDefinition", n.split("/", 1)[1]) or {})

    for n in names:
        wait_for(f"{n} Established", functools.partial(established, n), 60)
    return names


@pytest.fixture
def namespace(kubectl: Kubectl) -> Iterator[str]:
    name = make_namespace(kubectl.kube, f"t-{SESSION}-{uuid.uuid4().hex[:6]}")
    yield name
    kubectl.kube.delete("v1", "Namespace", name)  # not waited for, as --wait=false


def make_namespace(kube: Kube, name: str) -> str:
    """A new namespace, once its default ServiceAccount exists (pods are refused until
    then)."""
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_for("default service account",
             lambda: kube.get("v1", "ServiceAccount", "default", name) is not None, 30)
    return name


@pytest.fixture
def pool(kubectl: Kubectl, namespace: str) -> Iterator[str]:
    """A static Nightshift pool of one big KWOK node, private to the test."""
    name = f"p-{namespace}"
    kubectl.apply(kwok_node_pool(name))
    yield name
    kubectl.kube.delete("v1", "Node", f"kwok-{name}")


class OperatorProcess:
    """The operator as a real subprocess: killable mid-run for restart tests.

    It gets the cluster's operator environment (its kubeconfig and instance catalog), as
    the Helm chart would give it in a real deployment; `env` adds to or overrides that.
    """

    def __init__(self, cluster: Cluster, log: Path, env: dict[str, str] | None = None, *,
                 module: str = "nightshift.cli.main", namespace: str = NAMESPACE_GLOB) -> None:
        self.cluster = cluster
        self.log = log
        self.env = env or {}
        self.module = module
        self.namespace = namespace
        self.proc: subprocess.Popen[bytes] | None = None
        self.health_port = 0

    def start(self) -> None:
        env = {**os.environ, **self.cluster.operator_env(),
               "NIGHTSHIFT_PROGRESS_INTERVAL": "1",
               # fromS3 tests list tests/s3server.py's versitygw, on a free loopback port.
               "NIGHTSHIFT_S3_ENDPOINTS": "http://127.0.0.1:*", **self.env}
        out = self.log.open("ab")
        self.health_port = free_loopback_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.module, "operator",
             "--health-port", str(self.health_port), "--health-host", "127.0.0.1",
             "--namespace", self.namespace],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=ROOT)

    def wait_up(self, timeout: float = 60) -> float:
        """Wait until kopf serves its liveness endpoint (it starts that after the
        operator's start-up: imports, login, handlers registered); the seconds it took.
        A process that exits meanwhile fails the test with its log's tail."""
        t0 = time.monotonic()
        url = f"http://127.0.0.1:{self.health_port}/healthz"
        while time.monotonic() - t0 < timeout:
            if self.proc is None or self.proc.poll() is not None:
                pytest.fail(f"the operator exited before it was up:\n{self.tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2):
                    return time.monotonic() - t0
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        pytest.fail(f"the operator did not serve {url} within {timeout:.0f} s:\n{self.tail()}")

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, as when a node dies under the operator."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int | None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode if self.proc else None

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's pick; another process could take
    it before ours binds, which on a test machine does not happen in practice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def operator(cluster: Cluster, crds: list[str],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    op = OperatorProcess(cluster, log)
    op.start()
    yield op
    op.stop()

"""A storage daemon that keeps exiting (a CVMFS mount that fails, a squid.conf squid
refuses) is Running and never Ready: the not-Ready storage names it, with its exit code,
its last words and where to read the rest."""

from __future__ import annotations

from typing import Any

from nightshift.api import names, podstate
from nightshift.sharedstorage import status as ssstatus
from nightshift.sharedstorage.observe import Sources, SquidSampler, observe
from tests.unit.test_chart_kubecalls import RecordingKube
from tests.unit.test_refusals import NOW
from tests.unit.test_sharedstorage_plan import converge, storage

LAST_WORDS = ("Failed to initialize repository demo.nightshift.io: failed to discover "
              "HTTP proxy servers (23 - proxy auto-discovery failed)\nmount failed\n")


def looping(name: str, container: str = "cvmfs", message: str = LAST_WORDS,
            **terminated: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": "Running", "containerStatuses": [{
        "name": container, "restartCount": 4, "ready": False,
        "state": {"waiting": {"reason": "CrashLoopBackOff",
                              "message": f"back-off 40s restarting failed container={container}"}},
        "lastState": {"terminated": {"exitCode": 32, "reason": "Error", "message": message,
                                     **terminated}}}]}}


def test_a_crash_loop_is_its_exit_code_and_last_words() -> None:
    found = podstate.crash_looping(looping("software-cvmfs-client-q8"))
    assert found is not None and found.crash_loop
    assert found.text() == (
        "pod software-cvmfs-client-q8 container cvmfs: CrashLoopBackOff: it exits with code "
        "32: Failed to initialize repository demo.nightshift.io: failed to discover HTTP "
        "proxy servers (23 - proxy auto-discovery failed); mount failed")
    # Long last words keep their end, where a daemon says why it stops.
    long = podstate.crash_looping(looping("p", message="x" * 1000 + " the end"))
    assert long is not None and long.message.endswith("x the end")
    assert len(long.message) < podstate.LAST_WORDS + 40


def test_last_words_are_the_lines_that_say_why_without_their_dates() -> None:
    squid_log = ("2026/11/29 06:15:13| Processing Configuration File: squid.conf\n"
                 "2026/11/29 06:15:13| FATAL: Bungled squid.conf line 60: cache_mem lots\n"
                 "2026/11/29 06:15:13| Squid Cache (Version 5.7): Terminated abnormally.\n"
                 "CPU Usage: 0.009 seconds = 0.003 user + 0.006 sys\n")
    assert podstate.last_words(squid_log) == "FATAL: Bungled squid.conf line 60: cache_mem lots"
    assert podstate.last_words("starting\nbye\n") == "bye"  # nothing says why: the end
    assert podstate.last_words("2026-11-29T06:15:13.123Z ready\n") == "ready"
    assert podstate.last_words("") == ""


def test_running_ready_and_first_starts_are_not_crash_loops() -> None:
    ok = looping("p")
    ok["status"]["containerStatuses"][0]["state"] = {"running": {}}
    assert podstate.crash_looping(ok) is None
    starting = looping("p")
    starting["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] = "ContainerCreating"
    assert podstate.crash_looping(starting) is None
    assert podstate.crash_looping({"metadata": {"name": "p"}, "status": {}}) is None


def test_not_ready_says_where_to_read_the_rest() -> None:
    found = podstate.crash_looping(looping("software-cvmfs-client-q8"))
    assert found is not None
    (line,) = ssstatus.pods_not_starting("cvmfs", [found], "software-ns")
    assert line.endswith("mount failed; its last lines: kubectl logs -n software-ns "
                         "software-cvmfs-client-q8 -c cvmfs --previous; check spec.cvmfs"), line


def test_observe_reads_running_pods_once_per_container_while_not_ready() -> None:
    obj = storage("cvmfs-eks")
    held, _ = converge(storage("cvmfs-eks"))
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    labels = {names.LABEL_STORAGE: name}
    pods = [{"apiVersion": "v1", "kind": "Pod", **looping(f"{name}-cvmfs-client-{i}")}
            for i in range(3)]
    pods.append({"apiVersion": "v1", "kind": "Pod", **looping(f"{name}-squid-0", "squid")})
    for p in pods:
        p["metadata"].update(namespace=ns, labels=labels)
    kube = RecordingKube([obj, *held, *pods])
    got = observe(kube, Sources(sampler=SquidSampler(fetch=lambda url, t: "")), ns, name, NOW)
    assert got is not None
    assert sorted((p.pod, p.container) for p in got.pods_not_starting) == [
        (f"{name}-cvmfs-client-0", "cvmfs"), (f"{name}-squid-0", "squid")]

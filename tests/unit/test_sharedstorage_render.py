from __future__ import annotations

from typing import Any

import pytest
import yaml

from nightshift.api import names
from nightshift.pipelinerun.runnerparts import runner_problems
from nightshift.pipelinerun.spec import Stage, StorageRef
from nightshift.sharedstorage import cvmfs, gluster, nfs, squid
from nightshift.sharedstorage.objects import Storage
from nightshift.sharedstorage.render import endpoints, render_storage
from nightshift.sharedstorage.s3 import s3_binding
from nightshift.sharedstorage.validate import effective_squid_cidrs
from tests.bad_sharedstorages import FACTS, GOOD, good
from tests.golden_util import check_golden

# s3 renders nothing (test_s3_runs_nothing); the EKS cvmfs case on both platforms.
PLATFORMS = {"cvmfs-eks": ("aws", "local"), "cvmfs-local": ("local",), "s3": ()}
CASES = [(c, p) for c in sorted(GOOD) for p in PLATFORMS.get(c, ("aws",))]


def render(case: str, platform: str = "aws") -> list[dict[str, Any]]:
    st = Storage.of(GOOD[case])
    return render_storage(GOOD[case], platform=platform,  # type: ignore[arg-type]
                          squid_cidrs=effective_squid_cidrs(st.spec, FACTS))


def kind(objs: list[dict[str, Any]], k: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == k]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize(("case", "platform"), CASES, ids=[f"{c}-{p}" for c, p in CASES])
def test_golden(case: str, platform: str) -> None:
    suffix = f"-{platform}" if "cvmfs" in case else ""
    check_golden(f"sharedstorage/{case}{suffix}.yaml", render(case, platform))


@pytest.mark.parametrize("case", sorted(GOOD))
def test_every_object_is_labeled_owned_and_plain(case: str) -> None:
    objs = render(case)
    # A dict shared between two places comes out as a YAML anchor, which kubectl
    # shows as-is and which aliases under mutation.
    assert "&id" not in yaml.safe_dump_all(objs)
    for o in objs:
        meta = o["metadata"]
        assert meta["labels"][names.LABEL_STORAGE] == GOOD[case]["metadata"]["name"]
        assert meta["labels"][names.LABEL_MANAGED_BY] == names.MANAGED_BY
        if o["kind"] == "PersistentVolume":
            # Cluster-scoped: no namespaced owner; its labels say whose it is.
            assert "namespace" not in meta and "ownerReferences" not in meta
            assert meta["labels"][names.LABEL_STORAGE_NAMESPACE] == "physics"
            continue
        assert meta["namespace"] == "physics"
        if o["kind"] == "PersistentVolumeClaim" and meta["name"].endswith("-nfs-data"):
            continue
        (ref,) = meta["ownerReferences"]
        assert ref["kind"] == "SharedStorage" and ref["uid"] == "uid-ss" and ref["controller"]
    assert render(case) == objs  # deterministic


def test_s3_runs_nothing() -> None:
    assert render("s3") == []


def test_s3_binding_is_the_inline_storage_block() -> None:
    binding = s3_binding(Storage.of(GOOD["s3"]))
    assert binding.storage == StorageRef.model_validate({"name": "raw-s3", "s3": {
        "bucket": "snfactory-raw", "prefix": "nights/", "region": "us-west-2",
        "credentialsSecret": "s3-keys"}})
    assert binding.cache_max_bytes == 200 * 2**30
    stage = Stage.model_validate({
        "name": "ifu", "image": "img", "steps": [{"name": "a", "command": ["run"]}],
        "forEach": {"items": ["n1"]},
        "inputs": [{"storage": "raw-s3", "path": "{item}/"}],
        "outputs": [{"storage": "raw-s3", "path": "out/{item}/"}]})
    assert runner_problems(stage, {"raw-s3": binding.storage}) == []


# --- squid -------------------------------------------------------------------------

def squid_conf(case: str = "cvmfs-eks") -> str:
    (cm,) = [o for o in render(case) if o["kind"] == "ConfigMap"
             and o["metadata"]["name"].endswith("-squid")]
    text: str = cm["data"][squid.CONF_KEY]
    return text


def directive(conf: str, name: str) -> list[str]:
    return [line.split(None, 1)[1] for line in conf.splitlines()
            if line.split(None, 1)[:1] == [name]]


def test_squid_acl_comes_from_allowed_cidrs_only() -> None:
    conf = squid_conf()
    srcs = [a for a in directive(conf, "acl") if " src " in a]
    assert srcs == ["nightshift_clients src 10.0.0.0/16"]
    assert directive(conf, "http_access")[-2:] == ["allow nightshift_clients", "deny all"]
    # Without allowedCIDRs: the cluster's ranges.
    assert [a for a in directive(squid_conf("cvmfs-local"), "acl") if " src " in a] == [
        "nightshift_clients src 10.0.0.0/16 100.64.0.0/16"]


def test_squid_fetches_only_from_the_stratum_ones() -> None:
    conf = squid_conf()
    acls = directive(conf, "acl")
    assert "stratum1_names dstdomain -n cvmfs-stratum-one.cern.ch cvmfs.fnal.gov" in acls
    assert "stratum1_ports port 8000" in acls
    assert "deny !stratum1_names" in directive(conf, "http_access")
    local = squid_conf("cvmfs-local")
    assert "stratum1_ips dst 10.96.0.50" in directive(local, "acl")
    assert "stratum1_ports port 8080" in directive(local, "acl")
    assert not any("stratum1_names" in a for a in directive(local, "acl"))


def test_squid_caches_large_objects_and_collapses_misses() -> None:
    conf = squid_conf()
    assert directive(conf, "maximum_object_size") == ["1 GB"]
    assert directive(conf, "cache_mem") == ["2048 MB"]
    # 10 MB objects (the HEP cloud's large-object test) fit in memory.
    assert directive(conf, "maximum_object_size_in_memory") == ["64 MB"]
    assert squid.memory_object_limit_mib(256) == 16
    assert directive(conf, "cache_dir") == [f"aufs {squid.CACHE_DIR} 46080 16 256"]
    assert directive(conf, "collapsed_forwarding") == ["on"]
    patterns = directive(conf, "refresh_pattern")
    assert patterns[0] == r"-i /\.cvmfspublished$ 0 0% 0"
    assert "-i /data/[0-9a-f][0-9a-f]/ 525600 100% 525600 override-lastmod" in patterns


def test_squid_deployment_and_hpa() -> None:
    objs = render("cvmfs-eks")
    dep = next(d for d in kind(objs, "Deployment") if d["metadata"]["name"] == "software-squid")
    assert "replicas" not in dep["spec"], "the HPA owns the replica count"
    (c,) = pod_spec(dep)["containers"]
    assert c["image"] == "nightshift-squid"
    # The disk cache is requested as ephemeral storage: only a node whose disk holds it.
    assert c["resources"]["requests"] == {"cpu": "2", "memory": f"{2048 + 50 * 16 + 128}Mi",
                                          "ephemeral-storage": "50Gi"}
    (hpa,) = kind(objs, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)
    assert hpa["spec"]["metrics"][0]["resource"] == {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}
    assert hpa["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"]
    local = render("cvmfs-local", "local")
    assert kind(local, "HorizontalPodAutoscaler") == []
    (ldep,) = [d for d in kind(local, "Deployment")]
    assert ldep["spec"]["replicas"] == 1


def test_squid_service_nlb_only_on_aws() -> None:
    (svc,) = [s for s in kind(render("cvmfs-eks", "aws"), "Service")]
    assert svc["spec"]["type"] == "LoadBalancer"
    assert svc["metadata"]["annotations"] == squid.AWS_LB_ANNOTATIONS
    assert svc["spec"]["loadBalancerSourceRanges"] == ["10.0.0.0/16"]
    (local,) = kind(render("cvmfs-eks", "local"), "Service")
    assert local["spec"]["type"] == "LoadBalancer" and "annotations" not in local["metadata"]
    (cip,) = kind(render("cvmfs-local", "local"), "Service")
    assert cip["spec"]["type"] == "ClusterIP" and "loadBalancerSourceRanges" not in cip["spec"]


def test_config_change_rolls_the_squids() -> None:
    def conf_hash(m: dict[str, Any]) -> str:
        st = Storage.of(m)
        objs = render_storage(m, platform="aws", squid_cidrs=effective_squid_cidrs(st.spec, FACTS))
        dep = kind(objs, "Deployment")[0]
        return str(dep["spec"]["template"]["metadata"]["annotations"][
            names.ANNOTATION_CONFIG_HASH])
    other = good("cvmfs-eks")
    other["spec"]["cvmfs"]["squid"]["memoryCache"] = "4Gi"
    assert conf_hash(GOOD["cvmfs-eks"]) != conf_hash(other)


# --- cvmfs client ------------------------------------------------------------------

def test_cvmfs_client_daemonset() -> None:
    objs = render("cvmfs-eks")
    (ds,) = kind(objs, "DaemonSet")
    spec = pod_spec(ds)
    (c,) = spec["containers"]
    assert c["image"] == "nightshift-cvmfs-client" and c["securityContext"]["privileged"]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/cvmfs"]["mountPropagation"] == "Bidirectional"
    host = {v["name"]: v for v in spec["volumes"]}["mounts"]["hostPath"]["path"]
    assert host == "/var/lib/nightshift/cvmfs/physics/software"
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["imaging", "workers"]
    assert [t["value"] for t in spec["tolerations"]] == ["imaging", "workers"]
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}


def test_cvmfs_client_config() -> None:
    st = Storage.of(GOOD["cvmfs-eks"])
    conf = dict(line.split("=", 1) for line in cvmfs.client_config(st).splitlines()
                if "=" in line and not line.startswith("#"))
    assert conf["CVMFS_REPOSITORIES"] == "sft.cern.ch,dune.opensciencegrid.org"
    assert conf["CVMFS_HTTP_PROXY"] == '"http://software-squid.physics.svc.cluster.local:3128"'
    assert conf["CVMFS_QUOTA_LIMIT"] == "8192"
    assert conf["CVMFS_SERVER_URL"].count("@fqrn@") == 2


def test_cvmfs_pod_volume_shows_repositories_at_cvmfs() -> None:
    volume, mount = cvmfs.pod_volume(Storage.of(GOOD["cvmfs-eks"]))
    assert mount == {"name": volume["name"], "mountPath": "/cvmfs", "readOnly": True,
                     "mountPropagation": "HostToContainer"}
    assert volume["persistentVolumeClaim"] == {"claimName": "software-cvmfs-client",
                                               "readOnly": True}
    # The claim is bound to a PV of the node's mount directory (no hostPath in the pod:
    # the baseline and restricted Pod Security Standards refuse it).
    objs = render("cvmfs-eks")
    (pv,) = kind(objs, "PersistentVolume")
    assert pv["spec"]["hostPath"] == {"path": "/var/lib/nightshift/cvmfs/physics/software",
                                      "type": "Directory"}
    assert pv["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert pv["spec"]["claimRef"] == {"namespace": "physics", "name": "software-cvmfs-client"}
    (pvc,) = kind(objs, "PersistentVolumeClaim")
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]


# --- nfs ---------------------------------------------------------------------------

def test_nfs_dedicated_server_keeps_pipeline_pods_away() -> None:
    (dep,) = kind(render("nfs-dedicated"), "Deployment")
    affinity = pod_spec(dep)["affinity"]
    (term,) = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["labelSelector"]["matchExpressions"] == [
        {"key": names.LABEL_RUN, "operator": "Exists"}]
    assert term["namespaceSelector"] == {}
    node_terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert node_terms[0]["matchExpressions"][0]["values"] == ["nfs"]
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    annotations = dep["spec"]["template"]["metadata"]["annotations"]
    assert annotations[names.ANNOTATION_DO_NOT_DISRUPT] == "true"
    (colocated,) = kind(render("nfs-colocated-localdisk"), "Deployment")
    assert "podAntiAffinity" not in pod_spec(colocated)["affinity"]


def test_nfs_data_claim_outlives_the_storage_unless_delete() -> None:
    (claim,) = kind(render("nfs-dedicated"), "PersistentVolumeClaim")
    assert claim["spec"]["resources"]["requests"]["storage"] == "500Gi"
    assert claim["spec"]["storageClassName"] == "gp3"
    assert "ownerReferences" not in claim["metadata"]  # reclaimPolicy Retain
    deleting = good("nfs-dedicated", reclaimPolicy="Delete")
    (owned,) = kind(render_storage(deleting, platform="aws"), "PersistentVolumeClaim")
    assert owned["metadata"]["ownerReferences"][0]["kind"] == "SharedStorage"
    # localDisk: a hostPath, no claim.
    local = render("nfs-colocated-localdisk")
    assert kind(local, "PersistentVolumeClaim") == []
    vols = {v["name"]: v for v in pod_spec(kind(local, "Deployment")[0])["volumes"]}
    assert vols["export"]["hostPath"]["path"] == \
        "/mnt/k8s-disks/0/nightshift/nfs/physics-scratch"


def test_ganesha_conf_follows_export_options() -> None:
    conf = nfs.ganesha_conf(Storage.of(GOOD["nfs-colocated-localdisk"]))
    assert "Squash = Root_Squash;" in conf and "Access_Type = RW;" in conf
    assert "Protocols = 4;" in conf and "Name = VFS;" in conf


def test_nfs_client_volume() -> None:
    st = Storage.of(GOOD["nfs-dedicated"])
    objs = nfs.render_nfs_client(st, "10.96.4.20")
    check_golden("sharedstorage/nfs-dedicated-client.yaml", objs)
    pv, claim = objs
    assert pv["spec"]["nfs"] == {"server": "10.96.4.20", "path": "/data"}
    assert pv["spec"]["mountOptions"] == ["nfsvers=4.1", "noatime"]
    assert pv["spec"]["claimRef"] == {"namespace": "physics", "name": "raw-nfs-client"}
    assert "ownerReferences" not in pv["metadata"]
    assert pv["metadata"]["labels"][names.LABEL_STORAGE_NAMESPACE] == "physics"
    assert claim["spec"]["volumeName"] == pv["metadata"]["name"]
    assert nfs.storage_ref(st).model_dump(by_alias=True, exclude_none=True) == {
        "name": "raw", "pvc": {"claimName": "raw-nfs-client", "subPath": ""}}
    with pytest.raises(ValueError, match="ClusterIP"):
        nfs.render_nfs_client(st, "")


# --- glusterfs ---------------------------------------------------------------------

def servers(n: int, ready: bool = True) -> list[gluster.ServerPod]:
    return [gluster.ServerPod(f"broadband-gluster-{i}", f"10.0.1.{10 + i}", ready)
            for i in range(n)]


def test_gluster_servers_one_per_node_on_the_host_network() -> None:
    objs = render("gluster-distribute-replica")
    (sts,) = kind(objs, "StatefulSet")
    spec = pod_spec(sts)
    assert sts["spec"]["replicas"] == 3 and spec["hostNetwork"]
    (term,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["labelSelector"]["matchLabels"][names.LABEL_COMPONENT] == "gluster-server"
    assert term["namespaceSelector"] == {}
    bricks = {v["name"]: v for v in spec["volumes"]}["bricks"]["hostPath"]["path"]
    assert bricks == "/data/bricks/physics-broadband"
    assert "mkdir -p /bricks/brick0 /bricks/brick1 &&" in spec["containers"][0]["command"][2]
    (ds,) = kind(objs, "DaemonSet")
    assert pod_spec(ds)["hostNetwork"], "NUFA finds the local brick by the node's address"
    mount = pod_spec(ds)["containers"][0]["volumeMounts"][1]
    assert mount["mountPropagation"] == "Bidirectional"


def test_gluster_distribute_replica_commands() -> None:
    st = Storage.of(GOOD["gluster-distribute-replica"])
    cmds = gluster.volume_commands(st, servers(3))
    check_golden("sharedstorage/gluster-distribute-replica-commands.yaml",
                 [{"pod": c.pod, "argv": c.argv} for c in cmds])
    assert all(c.pod == "broadband-gluster-0" for c in cmds)
    argv = [c.argv[2:] for c in cmds]
    assert argv[:2] == [["peer", "probe", "10.0.1.11"], ["peer", "probe", "10.0.1.12"]]
    create = argv[2]
    assert create[:5] == ["volume", "create", "broadband", "replica", "2"]
    bricks = create[5:-1]
    assert create[-1] == "force" and len(bricks) == 6
    # Each replica set (consecutive pair) spans two servers.
    for pair in zip(bricks[::2], bricks[1::2], strict=True):
        assert pair[0].split(":")[0] != pair[1].split(":")[0]
    assert argv[-1] == ["volume", "start", "broadband"]
    assert not any("cluster.nufa" in a for a in argv)


def test_gluster_nufa_sets_the_option() -> None:
    st = Storage.of(GOOD["gluster-nufa"])
    pods = [gluster.ServerPod(f"montage-gluster-{i}", f"10.0.2.{i}", True) for i in range(4)]
    argv = [c.argv[2:] for c in gluster.volume_commands(st, pods)]
    assert "replica" not in argv[3]
    assert argv[-2:] == [["volume", "set", "montage", "cluster.nufa", "on"],
                         ["volume", "start", "montage"]]


def test_gluster_waits_for_every_server() -> None:
    st = Storage.of(GOOD["gluster-distribute-replica"])
    assert gluster.volume_commands(st, servers(2)) == []
    assert gluster.volume_commands(st, [*servers(2), *servers(3, ready=False)[2:]]) == []
    # Order and extra pods do not matter: pod names do.
    shuffled = list(reversed(servers(3)))
    assert gluster.volume_commands(st, shuffled) == gluster.volume_commands(st, servers(3))


def test_gluster_pod_volume() -> None:
    volume, mount = gluster.pod_volume(Storage.of(GOOD["gluster-nufa"]), "/nightshift/storage/m")
    assert volume["persistentVolumeClaim"] == {"claimName": "montage-gluster-client"}
    assert mount["mountPropagation"] == "HostToContainer"
    (pv,) = kind(render("gluster-nufa"), "PersistentVolume")
    assert pv["spec"]["hostPath"]["path"] == "/var/lib/nightshift/gluster/physics/montage"
    assert pv["spec"]["accessModes"] == ["ReadWriteMany"]


def test_endpoints() -> None:
    assert endpoints(GOOD["nfs-dedicated"]) == []
    assert endpoints(GOOD["nfs-dedicated"], service_ip="10.96.4.20") == [
        {"name": "nfs", "url": "nfs://10.96.4.20:/data"}]
    assert endpoints(GOOD["s3"]) == [{"name": "s3", "url": "s3://snfactory-raw/nights/"}]
    assert endpoints(GOOD["cvmfs-eks"], load_balancer="nlb.example")[1] == {
        "name": "squid-lb", "url": "http://nlb.example:3128"}


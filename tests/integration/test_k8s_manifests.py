"""examples/kubernetes rendered offline (docs/cluster.md, "Kubernetes"): no API server runs here.

`kubectl kustomize` renders the base and the tcg overlay; the objects are parsed and checked.
The kernel-pod template is rendered the way Enterprise Gateway's and Gateway Provisioners'
launch_kubernetes.py render it (a Jinja environment with their options, the KERNEL_* values
lower-cased), then parsed. kubectl is the only thing that may be missing: the test skips
without it, except under CI=true, where deps.sh installs it and its absence is a failure.
KUBECTL names another binary (Debian's 1.20, whose kustomize 2.0.3 the files are written for).
"""
import json
import os
import shutil
import subprocess

import jinja2
import pytest
import yaml

from sessions import ROOT

DEPLOY = ROOT / "examples" / "kubernetes"
BASE = DEPLOY / "base"
TCG = DEPLOY / "overlays" / "tcg"
KVM = "squat.ai/kvm"
EG_CLASS = "enterprise_gateway.services.processproxies.k8s.KubernetesProcessProxy"
# What cellvm-remote reads from a kernel pod's environment (docs/cluster.md, Inputs).
REMOTE_ENV = {"KERNEL_ID", "RESPONSE_ADDRESS", "PUBLIC_KEY", "PORT_RANGE",
              "KERNEL_LAUNCH_TIMEOUT", "CELLVM_REMOTE_IP", "CELLVM_REMOTE_ENCRYPTION"}
PORTS = [f"kernel-{i}" for i in range(6)]

# The KERNEL_* variables EG's KubernetesProcessProxy puts in the launcher's environment
# (k8s.py, container.py), lower-cased by launch_kubernetes.py, plus the kernelspec's env.
EG_SAMPLE = {
    "kernel_id": "3f0c2a1e-5b7d-4c8e-9a6f-1d2e3f4a5b6c",
    "kernel_pod_name": "jovyan-3f0c2a1e-5b7d-4c8e-9a6f-1d2e3f4a5b6c",
    "kernel_namespace": "cellvm-kernels",
    "kernel_image": "registry.example/cellvm-remote:1.0",
    "kernel_service_account_name": "cellvm-kernel",
    "kernel_uid": "1000",
    "kernel_gid": "100",
    "kernel_launch_timeout": "40",
    "kernel_username": "jovyan",
    "kernel_name": "cellvm_kubernetes",
    "kernel_cellvm_accel": "kvm",
}


def kubectl():
    exe = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if exe:
        return exe
    if os.environ.get("CI") == "true":
        pytest.fail("kubectl is missing under CI=true: scripts/deps.sh installs kubernetes-client")
    pytest.skip("kubectl is missing (scripts/deps.sh installs kubernetes-client)")


def kustomize(path):
    out = subprocess.run([kubectl(), "kustomize", str(path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, f"kubectl kustomize {path}: {out.stderr}"
    docs = list(yaml.safe_load_all(out.stdout))
    assert all(d and d.get("kind") for d in docs), "an empty or kindless document rendered"
    return docs


def one(objs, kind, name=None):
    found = [o for o in objs if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"{kind} {name or ''}: {len(found)} rendered"
    return found[0]


def render_pod(values, template=None):
    """launch_kubernetes.py's rendering: its Environment options, no yaml_safe filter (GP's has
    none), autoescape off for .j2 as theirs is."""
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True,
                             autoescape=jinja2.select_autoescape(
                                 disabled_extensions=("j2", "yaml"),
                                 default_for_string=True, default=True))
    text = template if template is not None else (BASE / "kernel-pod.yaml.j2").read_text()
    docs = [d for d in yaml.safe_load_all(env.from_string(text).render(**values)) if d]
    assert [d["kind"] for d in docs] == ["Pod"]
    return docs[0]


@pytest.fixture(scope="module")
def base():
    return kustomize(BASE)


@pytest.fixture(scope="module")
def tcg():
    return kustomize(TCG)


def test_the_base_renders_every_object(base):
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in base)
    assert kinds == sorted([
        ("Namespace", "cellvm-kernels"), ("ServiceAccount", "cellvm-kernel"),
        ("PersistentVolumeClaim", "cellvm-store"), ("DaemonSet", "kvm-device-plugin"),
        ("NetworkPolicy", "cellvm-kernels-from-gateway-only"),
        ("ConfigMap", "cellvm-kernelspecs")])
    for o in base:
        assert o.get("apiVersion") and o["metadata"].get("name")
    assert one(base, "Namespace")["metadata"]["labels"][
        "pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_store_claim_is_read_write_many(base):
    pvc = one(base, "PersistentVolumeClaim")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["metadata"]["namespace"] == "cellvm-kernels"


def test_the_device_plugin_offers_dev_kvm_as_squat_ai_kvm(base):
    ds = one(base, "DaemonSet")
    c = ds["spec"]["template"]["spec"]["containers"][0]
    assert c["image"].startswith("squat/generic-device-plugin")
    spec = json.loads(c["args"][c["args"].index("--device") + 1])
    assert spec["name"] == "kvm"
    assert [p["path"] for g in spec["groups"] for p in g["paths"]] == ["/dev/kvm"]
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert "/var/lib/kubelet/device-plugins" in mounts


def test_the_network_policy_admits_only_the_gateway_on_the_kernel_ports(base):
    np = one(base, "NetworkPolicy")
    spec = np["spec"]
    assert spec["podSelector"] == {"matchLabels": {"component": "kernel"}}
    assert spec["policyTypes"] == ["Ingress"]
    assert len(spec["ingress"]) == 1
    rule = spec["ingress"][0]
    assert len(rule["from"]) == 1
    peer = rule["from"][0]
    assert set(peer) == {"namespaceSelector", "podSelector"}, "every peer names a namespace"
    pods = peer["podSelector"]
    assert pods["matchLabels"] == {"app": "enterprise-gateway"}
    # kernel pods carry app=enterprise-gateway too: they must not reach each other
    assert {"key": "component", "operator": "NotIn", "values": ["kernel"]} in pods[
        "matchExpressions"]
    assert sorted(p["port"] for p in rule["ports"]) == PORTS
    assert {p["protocol"] for p in rule["ports"]} == {"TCP"}


def kernelspecs(objs):
    cm = one(objs, "ConfigMap", "cellvm-kernelspecs")
    return (json.loads(cm["data"]["eg-kernel.json"]), json.loads(cm["data"]["gp-kernel.json"]),
            cm["data"]["kernel-pod.yaml.j2"])


def test_the_configmap_holds_the_template_and_both_kernelspecs(base):
    eg, gp, template = kernelspecs(base)
    assert template == (BASE / "kernel-pod.yaml.j2").read_text()
    pp = eg["metadata"]["process_proxy"]
    assert pp["class_name"] == EG_CLASS
    assert pp["config"]["image_name"]
    kp = gp["metadata"]["kernel_provisioner"]
    assert kp["provisioner_name"] == "kubernetes-provisioner"
    assert kp["config"]["image_name"]
    for spec, kid in ((eg, "--RemoteProcessProxy.kernel-id"), (gp, "--kernel-id")):
        assert spec["argv"][spec["argv"].index(kid) + 1] == "{kernel_id}"
        assert spec["argv"][1].endswith("/scripts/launch_kubernetes.py")
        assert spec["env"]["KERNEL_CELLVM_ACCEL"] == "kvm"
        assert spec["interrupt_mode"] == "message"


def test_the_kernel_pod_is_cellvm_remote_non_root_with_kvm_and_the_store():
    pod = render_pod(EG_SAMPLE)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["labels"]["kernel_id"] == EG_SAMPLE["kernel_id"]
    assert meta["labels"]["app"] == "enterprise-gateway"
    assert meta["labels"]["component"] == "kernel"
    assert meta["name"] == EG_SAMPLE["kernel_pod_name"]
    assert meta["namespace"] == "cellvm-kernels"
    assert spec["restartPolicy"] == "Never"
    assert spec["terminationGracePeriodSeconds"] >= 30
    sc = spec["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert (sc["runAsUser"], sc["runAsGroup"]) == (1000, 100)
    [c] = spec["containers"]
    assert c["image"] == EG_SAMPLE["kernel_image"]
    assert c["command"] == ["/usr/local/bin/cellvm-remote"]
    after = c["args"][c["args"].index("--") + 1:]
    assert after[:2] == ["--backend", "microvm"]
    # inside the volume: the gateway makes it 0700, its own (the volume's root is root's)
    assert after[after.index("--snapshot-dir") + 1] == "/store/cellvm"
    assert after[after.index("--accel") + 1] == "auto"
    assert "--lease-ttl" not in after and "--checkpoint-every" not in after
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert c["resources"]["limits"][KVM] == 1
    env = {e["name"]: e for e in c["env"]}
    assert REMOTE_ENV <= set(env)
    assert env["KERNEL_ID"]["value"] == EG_SAMPLE["kernel_id"]
    assert env["KERNEL_LAUNCH_TIMEOUT"]["value"] == "40"
    assert env["CELLVM_REMOTE_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert [p["name"] for p in c["ports"]] == PORTS
    store = [m for m in c["volumeMounts"] if m["mountPath"] == "/store"]
    assert len(store) == 1
    [vol] = [v for v in spec["volumes"] if v["name"] == store[0]["name"]]
    assert vol["persistentVolumeClaim"]["claimName"] == "cellvm-store"


def test_the_kernel_pod_options_and_defaults():
    pod = render_pod({**EG_SAMPLE, "kernel_cellvm_lease_ttl": "45",
                      "kernel_cellvm_checkpoint_every": "120"})
    args = pod["spec"]["containers"][0]["args"]
    assert args[args.index("--lease-ttl") + 1] == "45"
    assert args[args.index("--checkpoint-every") + 1] == "120"
    # a launcher that passes no uid or gid: a non-root default, not root
    bare = {k: v for k, v in EG_SAMPLE.items() if k not in ("kernel_uid", "kernel_gid")}
    sc = render_pod(bare)["spec"]["securityContext"]
    assert sc["runAsUser"] != 0 and sc["runAsGroup"] != 0


@pytest.mark.parametrize("key", ["kernel_uid", "kernel_gid"])
def test_the_kernel_pod_refuses_uid_or_gid_0_as_eg_does(key):
    with pytest.raises(jinja2.UndefinedError, match="0_are_refused"):
        render_pod({**EG_SAMPLE, key: "0"})


def test_a_hostile_kernel_id_stays_one_string():
    """KERNEL_* values come from the client: YAML in one must not become fields."""
    evil = 'x"\n    privileged: true\n  hostPID: true\n#'
    pod = render_pod({**EG_SAMPLE, "kernel_id": evil, "kernel_image": evil})
    assert pod["metadata"]["labels"]["kernel_id"] == evil
    assert "hostPID" not in pod["spec"]
    assert pod["spec"]["containers"][0]["image"] == evil


def test_the_tcg_overlay_drops_kvm(tcg):
    # the device plugin stays, inert: it runs only on nodes labelled as having KVM
    ds = one(tcg, "DaemonSet")
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {"cellvm.dev/kvm": "true"}
    eg, gp, template = kernelspecs(tcg)
    assert eg["metadata"]["process_proxy"]["class_name"] == EG_CLASS
    assert gp["metadata"]["kernel_provisioner"]["provisioner_name"] == "kubernetes-provisioner"
    for spec in (eg, gp):
        assert spec["env"]["KERNEL_CELLVM_ACCEL"] == "tcg"
        values = {**EG_SAMPLE, **{k.lower(): v for k, v in spec["env"].items()}}
        c = render_pod(values, template)["spec"]["containers"][0]
        assert KVM not in c["resources"]["limits"]
        assert c["args"][c["args"].index("--accel") + 1] == "tcg"
    one(tcg, "PersistentVolumeClaim")
    one(tcg, "NetworkPolicy")

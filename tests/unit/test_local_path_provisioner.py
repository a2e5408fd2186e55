"""The local provider's default StorageClass: local-path-provisioner, built here, its manifest."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from conformance.build import gobuild, pins
from conformance.install import storage
from conformance.kube.manifests import render_all
from conformance.providers.local.layout import StateLayout


def _objects(node_path: Path = Path("/state/volumes")) -> dict[str, dict]:
    docs = storage.render("img/provisioner:v1", "img/toolbox:1", node_path, "build-1")
    assert docs[0]["kind"] == "Namespace", "the namespace must be applied before what lives in it"
    return {f"{doc['kind']}/{doc['metadata']['name']}": doc for doc in docs}


def test_the_storage_class_is_the_default_made_on_first_use_and_deleted_with_its_claim() -> None:
    objects = _objects()
    sc = objects[f"StorageClass/{storage.CLASS_NAME}"]
    assert sc["metadata"]["annotations"] == {"storageclass.kubernetes.io/is-default-class": "true"}
    assert sc["provisioner"] == storage.PROVISIONER_NAME
    assert sc["volumeBindingMode"] == "WaitForFirstConsumer"
    assert sc["reclaimPolicy"] == "Delete"
    args = objects["Deployment/local-path-provisioner"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--provisioner-name={storage.PROVISIONER_NAME}" in args


def test_volumes_live_below_the_node_path_the_provider_gives() -> None:
    layout = StateLayout(Path("/var/lib/krc"))
    assert layout.volumes.parent == layout.root  # so `cluster down` removes whatever is left
    config = json.loads(_objects(layout.volumes)["ConfigMap/local-path-config"]["data"]["config.json"])
    assert config == {
        "nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/var/lib/krc/volumes"]}]
    }


def test_every_image_is_local_and_never_pulled() -> None:
    objects = _objects()
    pod = objects["Deployment/local-path-provisioner"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert (container["image"], container["imagePullPolicy"]) == ("img/provisioner:v1", "Never")
    assert "--helper-image=img/toolbox:1" in container["args"]
    data = objects["ConfigMap/local-path-config"]["data"]
    helper = yaml.safe_load(data["helperPod.yaml"])
    (helper_container,) = helper["spec"]["containers"]
    # The provisioner copies the log of the container with exactly this name.
    assert helper_container["name"] == "helper-pod"
    assert (helper_container["image"], helper_container["imagePullPolicy"]) == ("img/toolbox:1", "Never")
    assert data["setup"].startswith("#!/bin/sh") and 'mkdir -m 0777 -p "$VOL_DIR"' in data["setup"]
    assert 'rm -rf "$VOL_DIR"' in data["teardown"]
    # A rebuilt image rolls the pod.
    template = objects["Deployment/local-path-provisioner"]["spec"]["template"]
    assert template["metadata"]["annotations"] == {"kuberay-conformance.io/image-build": "build-1"}


def test_rbac_is_what_the_provisioner_calls_and_no_more() -> None:
    objects = _objects()
    namespaced = {
        (tuple(r["resources"]), tuple(r["verbs"])) for r in objects["Role/local-path-provisioner"]["rules"]
    }
    assert namespaced == {(("pods",), ("create", "get", "delete")), (("pods/log",), ("get",))}
    cluster = {
        r["resources"][0]: set(r["verbs"])
        for r in objects["ClusterRole/kuberay-conformance-local-path-provisioner"]["rules"]
    }
    assert cluster["persistentvolumes"] == {"get", "list", "watch", "create", "delete"}
    assert cluster["nodes"] == {"get"}
    assert not any({"update", "patch"} & verbs for name, verbs in cluster.items() if name != "events")
    assert "configmaps" not in cluster and "secrets" not in cluster  # the config comes from files
    for name in (
        "RoleBinding/local-path-provisioner",
        "ClusterRoleBinding/kuberay-conformance-local-path-provisioner",
    ):
        (subject,) = objects[name]["subjects"]
        assert subject == {
            "kind": "ServiceAccount",
            "name": "local-path-provisioner",
            "namespace": storage.NAMESPACE,
        }
    for key, obj in objects.items():
        if not key.startswith(("Cluster", "StorageClass", "Namespace")):
            assert obj["metadata"]["namespace"] == storage.NAMESPACE, key


def test_the_pin_builds_the_module_root_stamped_with_its_version() -> None:
    tool = pins.TOOLS["local-path-provisioner"]
    assert (tool.module, tool.version) == ("github.com/rancher/local-path-provisioner", "v0.0.30")
    assert tool.binaries == ("local-path-provisioner",)
    assert f"-X main.VERSION={pins.LOCAL_PATH_PROVISIONER}" in tool.ldflags
    gomod = gobuild.build_module(tool, gobuild.carried_replaces("module x\n\ngo 1.23.0\n", ""))
    assert "require github.com/rancher/local-path-provisioner v0.0.30" in gomod
    assert "replace" not in gomod  # upstream's go.mod has no replace directives to carry over


def test_all_documents_of_the_manifest_render() -> None:
    docs = render_all(
        storage.TEMPLATE,
        namespace="n",
        image="i",
        helper_image="h",
        version="v",
        managed_by="m",
        node_path="/p",
        class_name="c",
        provisioner_name="p/q",
        image_build="b",
    )
    kinds = [doc["kind"] for doc in docs]
    assert kinds == [
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "StorageClass",
    ]

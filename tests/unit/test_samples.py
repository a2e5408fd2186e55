"""What conformance/samples.py lists, changes and requires of KubeRay's sample manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from conformance import samples

RAY_IMAGE = "localhost/kuberay-conformance/ray:2.58.0"
REDIS_IMAGE = "localhost/kuberay-conformance/redis:bookworm"
TO = samples.Adaptation(
    RAY_IMAGE, "2.58.0", REDIS_IMAGE, "IfNotPresent", {"limits": {"cpu": "1"}}, {"limits": {"cpu": "500m"}}
)


def _pod(image: str = "rayproject/ray:2.52.0", **spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "ray", "image": image}], **spec}}


def _cluster(head: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "c"},
        "spec": {
            "rayVersion": "2.52.0",
            "headGroupSpec": {"template": head or _pod()},
            "workerGroupSpecs": [{"groupName": "w", "replicas": 1, "template": _pod()}],
            **spec,
        },
    }


def _offer(**changes: Any) -> samples.Offer:
    base: dict[str, Any] = {
        "served": {
            ("ray.io/v1", "RayCluster"): True,
            ("ray.io/v1", "RayJob"): True,
            ("v1", "ConfigMap"): True,
            ("v1", "Secret"): True,
            ("rbac.authorization.k8s.io/v1", "ClusterRole"): False,
        },
        "node_images": frozenset({RAY_IMAGE, REDIS_IMAGE}),
        "node_labels": ({"kubernetes.io/os": "linux"},),
        "extended_resources": {"nvidia.com/gpu": 4},
        "csi_drivers": frozenset(),
        "feature_gates": {"RayClusterMTLS": False, "RayClusterStatusConditions": True},
        "batch_scheduler": "",
        "pulls_images": False,
        "reaches_internet": False,
    }
    return samples.Offer(**{**base, **changes})


def _needs(*documents: dict[str, Any], offer: samples.Offer | None = None) -> list[str]:
    sample = samples.adapt(samples.SampleManifest("s.yaml", documents), TO)
    return samples.needs(sample, offer or _offer())


def test_listing_holds_the_files_with_a_ray_object(tmp_path: Path) -> None:
    (tmp_path / "ray-cluster.a.yaml").write_text(yaml.safe_dump(_cluster()))
    (tmp_path / "cronjob.yaml").write_text("apiVersion: ray.io/v1\nkind: RayCronJob\nmetadata: {name: x}\n")
    (tmp_path / "broken.yaml").write_text("kind: [unclosed\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "ray-cluster.b.yaml").write_text(yaml.safe_dump(_cluster()))
    assert samples.listing(tmp_path) == ["broken.yaml", "ray-cluster.a.yaml"]


def test_the_job_is_followed_when_a_file_also_holds_its_cluster() -> None:
    job = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "j"}, "spec": {}}
    sample = samples.SampleManifest("s.yaml", (_cluster(), job))
    assert sample.kind == "RayJob"
    assert sample.main is job


def test_adapt_swaps_ray_and_redis_images_sizes_and_ray_version_only() -> None:
    head = {
        "spec": {
            "containers": [
                {"name": "ray", "image": "rayproject/ray:2.52.0-py310"},
                {"name": "r", "image": "redis:7.4.0"},
            ]
        }
    }
    cluster = _cluster(head)
    cluster["spec"]["workerGroupSpecs"][0]["template"] = _pod("rayproject/ray-ml:2.46.0-gpu")
    adapted = samples.adapt(samples.SampleManifest("s.yaml", (cluster,)), TO).documents[0]["spec"]
    head_containers = adapted["headGroupSpec"]["template"]["spec"]["containers"]
    assert head_containers[0]["image"] == RAY_IMAGE
    assert head_containers[0]["resources"] == {"limits": {"cpu": "1"}}
    assert head_containers[1]["image"] == REDIS_IMAGE
    assert (
        adapted["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["image"]
        == "rayproject/ray-ml:2.46.0-gpu"
    )
    assert adapted["rayVersion"] == "2.58.0"
    assert cluster["spec"]["rayVersion"] == "2.52.0"  # the sample as read is left alone


def test_a_plain_sample_needs_nothing_here() -> None:
    assert _needs(_cluster()) == []


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        (
            {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "q"}},
            "does not serve",
        ),
        (
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}},
            "cluster-scoped ClusterRole r",
        ),
        (_cluster(tlsOptions={"enabled": True}), "RayClusterMTLS feature gate for tlsOptions"),
        (
            _cluster(networkPolicy={}),
            "RayClusterNetworkPolicy feature gate for networkPolicy, which the operator runs without (this",
        ),
        (_cluster(gcsFaultToleranceOptions={"backend": "rocksdb"}), "GCSFaultToleranceEmbeddedStorage"),
        (
            _cluster(_pod(nodeSelector={"cloud.google.com/gke-tpu-topology": "2x2"})),
            "a node labelled cloud.google.com/gke-tpu-topology=2x2",
        ),
        (_cluster(_pod(schedulerName="volcano")), "the scheduler volcano"),
        (_cluster(_pod("fluent/fluent-bit:3.2.2")), "the image fluent/fluent-bit:3.2.2, which no node holds"),
        (
            _cluster(_pod(volumes=[{"name": "v", "csi": {"driver": "gcsfuse.csi.storage.gke.io"}}])),
            "the CSI driver gcsfuse",
        ),
        (
            _cluster(_pod(volumes=[{"name": "v", "secret": {"secretName": "ca-tls"}}])),
            "a Secret ca-tls that the sample expects",
        ),
    ],
)
def test_what_the_cluster_lacks_is_named(document: dict[str, Any], reason: str) -> None:
    assert any(reason in found for found in _needs(document)), _needs(document)


def test_a_batch_scheduler_is_needed_unless_the_operator_runs_it() -> None:
    cluster = _cluster()
    cluster["metadata"]["labels"] = {samples.SCHEDULER_LABEL: "volcano"}
    assert _needs(cluster) == ["the batch scheduler volcano (the operator runs with none)"]
    assert _needs(cluster, offer=_offer(batch_scheduler="volcano")) == []


def test_what_the_sample_makes_or_marks_optional_is_not_needed() -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ca-tls"}}
    env = [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "other", "key": "k", "optional": True}}}]
    pod = _pod(volumes=[{"name": "v", "secret": {"secretName": "ca-tls"}}])
    pod["spec"]["containers"][0]["env"] = env
    assert _needs(_cluster(pod), secret) == []


def test_gpus_count_against_the_most_one_node_has() -> None:
    pod = _pod()
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 8}}
    cluster = _cluster()
    cluster["spec"]["workerGroupSpecs"][0]["template"] = pod
    assert _needs(cluster) == ["8 nvidia.com/gpu in one pod, which no node has"]
    assert _needs(cluster, offer=_offer(extended_resources={"nvidia.com/gpu": 8})) == []


def test_downloads_need_the_internet_only_where_pods_cannot_reach_it() -> None:
    job = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "j"},
        "spec": {
            "entrypoint": "python /home/ray/samples/sample_code.py",
            "runtimeEnvYAML": "pip:\n  - requests==2.26.0\n",
        },
    }
    head = _pod()
    head["spec"]["containers"][0]["lifecycle"] = {
        "postStart": {"exec": {"command": ["sh", "-c", "wget -O x https://example.org/runsc"]}}
    }
    service_config = (
        "applications:\n  - name: a\n    runtime_env:\n      working_dir: https://github.com/x/y.zip\n"
    )
    service = {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "s"},
        "spec": {"serveConfigV2": service_config},
    }
    offline = {"served": {**_offer().served, ("ray.io/v1", "RayService"): True}}
    assert _needs(job, offer=_offer(**offline)) == [
        "the internet (runtime_env pip), which the cluster's pods cannot reach"
    ]
    assert "`https://example.org/runsc` in container ray" in _needs(_cluster(head))[0]
    assert "runtime_env working_dir https://github.com/x/y.zip" in _needs(service, offer=_offer(**offline))[0]
    assert _needs(job, _cluster(head), service, offer=_offer(reaches_internet=True, **offline)) == []


def test_a_local_dashboard_url_is_no_download() -> None:
    job = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "j"},
        "spec": {"entrypoint": "curl http://localhost:8265/api"},
    }
    assert _needs(job) == []


@pytest.mark.parametrize(
    ("image", "normal"),
    [
        ("redis:7.4.0", "docker.io/library/redis:7.4.0"),
        ("rayproject/ray", "docker.io/rayproject/ray:latest"),
        ("quay.io/kuberay/submitter:v1.5.1", "quay.io/kuberay/submitter:v1.5.1"),
        ("localhost/kuberay-conformance/ray:2.58.0", "localhost/kuberay-conformance/ray:2.58.0"),
    ],
)
def test_image_names_compare_in_their_full_form(image: str, normal: str) -> None:
    assert samples.normalized_image(image) == normal


def test_role_bindings_to_the_default_namespace_move_to_the_checks() -> None:
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "b"},
        "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "default"}],
    }
    moved = samples.in_namespace(samples.SampleManifest("s.yaml", (binding,)), "krc-x")
    assert moved.documents[0]["subjects"][0]["namespace"] == "krc-x"
    assert binding["subjects"][0]["namespace"] == "default"


def test_a_job_on_an_existing_cluster_needs_that_cluster() -> None:
    job = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "j"},
        "spec": {"entrypoint": "python -V", "clusterSelector": {"ray.io/cluster": "c"}},
    }
    assert _needs(job) == ["a RayCluster selected by ray.io/cluster=c that the sample expects to exist"]
    assert _needs(job, _cluster()) == []

"""The Gateway API on the local cluster and the load generator, end to end.

Traefik (built here) routes an HTTPRoute with two weighted backends; the generator runs in the
cluster with Guaranteed QoS, sends through the Gateway's address and brings back one record per
request. The backends are busybox httpd serving a fixed JSON answer (and a slow CGI for the
self-check) in the toolbox image, which also carries the generator: vegeta is copied into a pod
of any image with a shell, as it is into the Ray image in a conformance run, so no Ray is needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from conformance.build import gobuild, pins
from conformance.install import gateway
from conformance.kube.manifests import render_all
from conformance.kube.pods import is_ready
from conformance.kube.rayservice import Gateways, route_weights
from conformance.kube.wait import wait_for
from conformance.load import analysis
from conformance.load.analysis import LoadShortfall
from conformance.load.generator import Delivery, LoadGenerator, LoadSpec, Target
from conformance.providers.local.provider import LocalProvider

CLASS = "traefik"
SLOW_CGI = "#!/bin/sh\nsleep 1\necho 'Content-Type: application/json'\necho\necho '{\"cluster\": \"slow\"}'\n"


@pytest.fixture(scope="module")
def installed(local_provider: LocalProvider, api: client.ApiClient) -> gateway.GatewayFacts:
    return gateway.install_local(local_provider, api, CLASS, timeout=300)


@pytest.fixture(scope="module")
def image(toolbox: str) -> str:
    return toolbox


@pytest.fixture(scope="module")
def delivery(local_provider: LocalProvider, toolbox: str) -> Delivery:
    vegeta = gobuild.ensure_built(pins.TOOLS["vegeta"], local_provider.cache) / "vegeta"
    return Delivery(toolbox, "Never", vegeta)


def _backend(name: str, image: str) -> list[dict[str, Any]]:
    """A Deployment-less pod + Service answering {"cluster": name} on :8080 (and /cgi-bin/slow)."""
    labels = {"app": name}
    config = {
        "metadata": {"name": name},
        "data": {"index.html": f'{{"cluster": "{name}", "version": "v1"}}', "slow": SLOW_CGI},
    }
    script = "mkdir -p /tmp/www/cgi-bin && cp /www/index.html /tmp/www/ && cp /www/slow /tmp/www/cgi-bin/ && "
    script += "chmod +x /tmp/www/cgi-bin/slow && exec httpd -f -p 8080 -h /tmp/www"
    pod = {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "containers": [
                {
                    "name": "httpd",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", script],
                    "ports": [{"containerPort": 8080}],
                    "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                    "resources": {"requests": {"cpu": "20m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
                    "volumeMounts": [{"name": "www", "mountPath": "/www"}],
                }
            ],
            "volumes": [{"name": "www", "configMap": {"name": name}}],
        },
    }
    service = {"metadata": {"name": name}, "spec": {"selector": labels, "ports": [{"port": 8080}]}}
    return [config, pod, service]


@pytest.fixture
def backends(core: client.CoreV1Api, namespace: str, image: str) -> Iterator[list[str]]:
    names = ["backend-a", "backend-b"]
    for name in names:
        config, pod, service = _backend(name, image)
        core.create_namespaced_config_map(namespace, config)
        core.create_namespaced_pod(namespace, pod)
        core.create_namespaced_service(namespace, service)
    for name in names:
        wait_for(
            core.list_namespaced_pod,
            is_ready,
            what=f"{name} ready",
            timeout=120,
            namespace=namespace,
            field_selector=f"metadata.name={name}",
        )
    yield names


def _weighted_route(api: client.ApiClient, namespace: str, host: str, weights: dict[str, int]) -> str:
    """A Gateway and an HTTPRoute splitting `host` over the backends by `weights`, created as such
    (changing a route after the fact races its status writer)."""
    gateways = Gateways(api, namespace)
    gateway_doc, route_doc = render_all(
        "gateway/route.yaml", name="split", class_name=CLASS, hostname=host, service="backend-a", port=8080
    )
    route_doc["spec"]["rules"][0]["backendRefs"] = [
        {"name": name, "port": 8080, "weight": weight} for name, weight in weights.items()
    ]
    for plural, doc in (("gateways", gateway_doc), ("httproutes", route_doc)):
        gateways.custom.create_namespaced_custom_object(gateway.GROUP, "v1", namespace, plural, doc)
    address = gateways.wait_programmed("split", 120)
    ready = gateways.wait_route_ready("split", "split", 120)
    assert route_weights(ready) == weights
    return address


def test_traefik_is_a_gateway_controller_with_the_service_address(
    installed: gateway.GatewayFacts, api: client.ApiClient
) -> None:
    custom = client.CustomObjectsApi(api)
    gc = custom.get_cluster_custom_object(gateway.GROUP, "v1", "gatewayclasses", CLASS)
    assert gateway.condition_true(gc, "Accepted"), gateway.describe_conditions(gc)
    service = client.CoreV1Api(api).read_namespaced_service("traefik", gateway.NAMESPACE)
    assert installed.address == service.spec.cluster_ip
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(
        "httproutes.gateway.networking.k8s.io"
    )
    assert crd.metadata.annotations["gateway.networking.k8s.io/channel"] == "standard"


def test_load_through_a_weighted_route_comes_back_per_request(
    installed: gateway.GatewayFacts,
    api: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    delivery: Delivery,
    backends: list[str],
) -> None:
    host = f"{namespace}.krc.test"
    address = _weighted_route(api, namespace, host, {"backend-a": 80, "backend-b": 20})
    assert address == installed.address
    gen = LoadGenerator(api, namespace, delivery, [Target(f"http://{address}/", host)], LoadSpec(30, 10))
    gen.start(120)
    assert core.read_namespaced_pod("load", namespace).status.qos_class == "Guaranteed"
    records = gen.collect(120)
    summary = analysis.summarize(records)
    assert summary.failed == 0, summary.describe()
    assert summary.requests >= 30 * 10 * 0.95
    assert {r.backend for r in records} == {"backend-a", "backend-b"}
    share = analysis.backend_share(records, "backend-a")
    assert share is not None and abs(share - 0.8) <= 0.1, f"backend-a answered {share:.0%} at weight 80%"
    seconds = analysis.per_second(records)
    assert len(seconds) >= 9 and all(s.p50_ms is not None for s in seconds)


def test_a_generator_that_cannot_keep_its_rate_is_a_harness_error(
    installed: gateway.GatewayFacts,
    api: client.ApiClient,
    namespace: str,
    delivery: Delivery,
    backends: list[str],
) -> None:
    host = f"{namespace}.krc.test"
    address = _weighted_route(api, namespace, host, {"backend-a": 100})
    # Two workers against one-second answers can send about 2 req/s of the 20 asked for.
    spec = LoadSpec(rate=20, max_duration_s=4, max_workers=2)
    gen = LoadGenerator(api, namespace, delivery, [Target(f"http://{address}/cgi-bin/slow", host)], spec)
    gen.start(120)
    with pytest.raises(LoadShortfall, match="more than 5% short"):
        gen.collect(120)
    assert gen.records and all(r.backend == "slow" for r in gen.records if r.ok)

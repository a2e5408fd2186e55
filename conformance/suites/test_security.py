"""Area security: token authentication, the token kept out of reports, exposure, the harness's RBAC.

Token authentication (`spec.authOptions.mode: token`, Ray >= 2.52; KubeRay 1.6.0 and later):
the operator makes a Secret named after the cluster with the key `auth_token` and gives it to
Ray as RAY_AUTH_TOKEN; Ray's dashboard then answers 401 without a token and 403 with a wrong one
(`ray/_private/authentication/http_token_authentication.py`). The probes run inside the head, so
the token never passes through the harness's command lines, logs or assertion messages.
Each check's docstring names the KubeRay misbehaviour it exists to catch ("Catches: ...").

The last two checks are the harness's own hygiene (the token kept out of the run's files, the
read paths under the documented RBAC): area `harness`, reported apart and not in the verdict.
"""

from __future__ import annotations

import base64
import copy
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from conformance import capabilities as caps
from conformance.checks import NOT_APPLICABLE, RUN_KEY
from conformance.environment import Environment
from conformance.install import operator_facts
from conformance.kube import diagnostics
from conformance.kube.manifests import manifest_values, render, render_all
from conformance.kube.ray import Ray
from conformance.profiles import Profile
from conformance.suites.shared import Shared
from conformance.timeouts import Timeouts

pytestmark = pytest.mark.area("security")

NAME = "secured"
DASHBOARD_PORT = 8265
TOKEN_KEY = "auth_token"
# Requests made from inside the head through the head Service: a dashboard API, the job
# submission API (list and submit). Prints only status codes.
PROBE = """
import json, os, urllib.request, urllib.error
base = "http://{service}:{port}"
# A head KubeRay started without its token is KubeRay's failure: the codes below show it.
right = os.environ.get("RAY_AUTH_TOKEN", "")
tokens = {{"none": None, "wrong": right[::-1] + "x", "right": right}}
calls = {{
    "dashboard": ("GET", "/api/cluster_status", None),
    "jobs_list": ("GET", "/api/jobs/", None),
    "jobs_submit": ("POST", "/api/jobs/", json.dumps({{"entrypoint": "echo probe"}}).encode()),
}}
out = {{}}
for call, (method, path, body) in calls.items():
    for kind, token in tokens.items():
        request = urllib.request.Request(base + path, data=body, method=method)
        request.add_header("Content-Type", "application/json")
        if token is not None:
            request.add_header("Authorization", "Bearer " + token)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                code = answer.status
        except urllib.error.HTTPError as error:
            code = error.code
        except OSError as error:  # refused or timed out: reported, not a crash of the probe
            code = "unreachable " + type(error).__name__
        out[call + "/" + kind] = code
out["head_has_token"] = bool(right)
print("PROBE" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def shared(api: client.ApiClient, module_namespace: str) -> Ray:
    return Ray(api, module_namespace)


@pytest.fixture(scope="module")
def secured(shared: Ray, profile: Profile, ray_version: str, timeouts: Timeouts) -> Shared[dict[str, Any]]:
    """A head-only RayCluster with token authentication, made ready by the first check that asks."""

    def make() -> dict[str, Any]:
        values = {**manifest_values(profile, ray_version), "name": NAME, "head_num_cpus": 1}
        body = render("ray/raycluster.yaml", **values)
        body["spec"]["authOptions"] = {"mode": "token"}
        shared.create("rayclusters", body)
        return shared.wait_cluster_ready(NAME, timeouts.ready)

    return Shared(make)


def _token(ray: Ray) -> str:
    """The token, kept in memory only: never printed, never in an assertion message."""
    secret = ray.core.read_namespaced_secret(NAME, ray.namespace)
    return base64.b64decode(secret.data[TOKEN_KEY]).decode()


def _secret_or_fail(ray: Ray) -> client.V1Secret:
    """The cluster's token Secret; token mode without one is KubeRay's failure, not an error."""
    try:
        return ray.core.read_namespaced_secret(NAME, ray.namespace)
    except ApiException as exc:
        if exc.status == 404:
            raise AssertionError(f"token mode made no Secret {NAME}") from exc
        raise


def _requires_token_auth(capabilities: caps.Capabilities, ray_version: str) -> None:
    if caps.version_tuple(ray_version) < (2, 52, 0):
        pytest.skip(f"not applicable: Ray {ray_version} predates token authentication (2.52)")
    why = capabilities.missing("kuberay>=1.6.0")
    if why:
        pytest.skip("not applicable: " + why)


@pytest.mark.smoke
def test_token_auth_gives_the_cluster_a_secret_with_auth_token(
    capabilities: caps.Capabilities, ray_version: str, secured: Shared[dict[str, Any]], shared: Ray
) -> None:
    """Catches: token mode without its Secret (`auth_token`, owned by the RayCluster), a short
    token, or the token written into the pod spec instead of a secretKeyRef."""
    _requires_token_auth(capabilities, ray_version)
    secured.get()
    secret = _secret_or_fail(shared)
    assert TOKEN_KEY in (secret.data or {}), f"Secret {NAME} has keys {sorted(secret.data or {})}"
    assert len(_token(shared)) >= 16, "the generated token is shorter than 16 characters"
    owners = [(o.kind, o.name) for o in secret.metadata.owner_references or []]
    assert owners == [("RayCluster", NAME)], f"owners of Secret {NAME}: {owners}"
    env = {e.name: e for e in shared.head_pod(NAME).spec.containers[0].env or []}
    assert env.get("RAY_AUTH_MODE") is not None and env["RAY_AUTH_MODE"].value == "token"
    token_env = env.get("RAY_AUTH_TOKEN")
    assert token_env is not None, "the head has no RAY_AUTH_TOKEN"
    assert token_env.value is None, "the token is written into the pod spec instead of a secretKeyRef"
    ref = token_env.value_from.secret_key_ref
    assert (ref.name, ref.key) == (NAME, TOKEN_KEY), f"RAY_AUTH_TOKEN comes from {ref.name}/{ref.key}"


@pytest.mark.smoke
def test_dashboard_and_job_submission_require_the_token(
    capabilities: caps.Capabilities, ray_version: str, secured: Shared[dict[str, Any]], shared: Ray
) -> None:
    """Catches: the dashboard or the job-submission API answering without the token (not 401),
    with a wrong one (not 403), or refusing the right one."""
    _requires_token_auth(capabilities, ray_version)
    secured.get()
    service = f"{NAME}-head-svc.{shared.namespace}.svc.cluster.local"
    out = shared.python_in_head(NAME, PROBE.format(service=service, port=DASHBOARD_PORT))
    codes = json.loads(out.split("PROBE", 1)[1].strip().splitlines()[0])
    for call in ("dashboard", "jobs_list", "jobs_submit"):
        assert codes[f"{call}/none"] == 401, f"{call} without a token: {codes}"
        assert codes[f"{call}/wrong"] == 403, f"{call} with a wrong token: {codes}"
        assert codes[f"{call}/right"] == 200, f"{call} with the right token: {codes}"


def test_the_head_is_not_exposed_outside_the_cluster(
    secured: Shared[dict[str, Any]], shared: Ray, profile: Profile
) -> None:
    """Catches: a head reachable from outside the cluster by default: a NodePort/LoadBalancer
    Service, external IPs, host ports or network, an Ingress, a node address answering."""
    if profile.exposes_head:
        pytest.skip(
            NOT_APPLICABLE + f"the profile exposes the head Service ({profile.head_service_type}); "
            "the report's environment says so"
        )
    secured.get()
    service = shared.core.read_namespaced_service(f"{NAME}-head-svc", shared.namespace)
    assert service.spec.type == "ClusterIP", f"head Service type {service.spec.type}"
    assert not service.spec.external_ips, f"head Service external IPs {service.spec.external_ips}"
    assert not [p.node_port for p in service.spec.ports if p.node_port], "head Service has node ports"
    head = shared.head_pod(NAME)
    assert not head.spec.host_network, "the head runs in the host's network"
    host_ports = [p.host_port for c in head.spec.containers for p in c.ports or [] if p.host_port]
    assert not host_ports, f"the head binds host ports {host_ports}"
    ingresses = client.NetworkingV1Api(shared.api).list_namespaced_ingress(shared.namespace).items
    assert not ingresses, f"Ingresses made for the cluster: {[i.metadata.name for i in ingresses]}"
    # From where the harness runs (outside the cluster), no node address answers on the dashboard port.
    answering = [addr for addr in _node_addresses(shared.core) if _answers(addr, DASHBOARD_PORT)]
    assert not answering, f"the dashboard port answers on node addresses {answering}"


def _node_addresses(core: client.CoreV1Api) -> list[str]:
    return [
        a.address
        for node in core.list_node().items
        for a in node.status.addresses or []
        if a.type in ("InternalIP", "ExternalIP")
    ]


def _answers(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=3):
            return True
    except OSError:
        return False


@pytest.mark.area("harness")
@pytest.mark.smoke
def test_the_token_never_appears_in_the_run_artifacts(
    capabilities: caps.Capabilities,
    ray_version: str,
    secured: Shared[dict[str, Any]],
    shared: Ray,
    conformance: Environment,
    request: pytest.FixtureRequest,
) -> None:
    """A diagnostics bundle of the secured cluster is made on purpose (as a failure would make it);
    then every file of the run so far, and the results not yet written, are searched for the token.

    summary.json, junit.xml, index.html and the Allure page are written after the last check, so
    the token is also handed to the run (in memory), which searches every file once the last one
    is written and turns this check into a failure if any holds it.

    Catches: the harness leaking a cluster's secret into its files; its own hygiene (area
    `harness`, not in the verdict), not a KubeRay misbehaviour.
    """
    _requires_token_auth(capabilities, ray_version)
    secured.get()
    token = _token(shared)
    run = request.config.stash[RUN_KEY]
    run_dir = run.options.run_dir
    bundle = run_dir / "diagnostics" / "security-token-canary"
    files = diagnostics.collect(shared.api, shared.namespace, conformance.operator_namespace, bundle)
    assert any("logs/" in str(f) for f in files), "the bundle has no container logs to search"
    forms = {token, base64.b64encode(token.encode()).decode()}
    run.keep_secret(request.node.nodeid, *forms)
    leaking = [str(path.relative_to(run_dir)) for path in _files(run_dir) if _holds_any(path, forms)]
    results = json.dumps([r.__dict__ for r in run.results.values()], default=str)
    assert not leaking, f"the token appears in {leaking}"
    assert not any(form in results for form in forms), "the token appears in the results of the run"


def _files(root: Path) -> Iterator[Path]:
    return (p for p in root.rglob("*") if p.is_file())


def _holds_any(path: Path, forms: set[str]) -> bool:
    data = path.read_bytes()
    return any(form.encode() in data for form in forms)


# -- the harness's own permissions ---------------------------------------------------------

READER_SA = "krc-reader"


@pytest.fixture
def reader_api(api: client.ApiClient, namespace: str, conformance: Environment) -> Iterator[client.ApiClient]:
    """An API client authenticated as a ServiceAccount bound to exactly manifests/rbac/harness-reader.yaml."""
    core = client.CoreV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": READER_SA}})
    name = f"krc-reader-{conformance.options.run_id}"[:63].lower()
    objects = render_all(
        "rbac/harness-reader.yaml", name=name, service_account=READER_SA, namespace=namespace
    )
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_cluster_role(objects[0])
    try:
        rbac.create_cluster_role_binding(objects[1])
        token = core.create_namespaced_service_account_token(
            READER_SA, namespace, {"spec": {"expirationSeconds": 600}}
        ).status.token
        yield _client_with_token(api, token)
    finally:
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            try:
                delete(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def _client_with_token(api: client.ApiClient, token: str) -> client.ApiClient:
    configuration = copy.copy(api.configuration)
    configuration.cert_file = configuration.key_file = None
    configuration.api_key = {"authorization": token}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(configuration)


@pytest.mark.area("harness")
def test_read_paths_run_with_the_documented_permissions(
    reader_api: client.ApiClient,
    api: client.ApiClient,
    conformance: Environment,
    ray: Ray,
    cluster_values: dict[str, Any],
    timeouts: Timeouts,
    tmp_path: Path,
) -> None:
    """The harness's own hygiene (area `harness`, not in the verdict): its read paths need no
    more than docs/permissions.md grants.

    Catches: the harness needing more permissions than it documents, not a KubeRay misbehaviour."""
    ray.create("rayclusters", render("ray/raycluster.yaml", **{**cluster_values, "name": "watched"}))
    ray.wait_cluster_ready("watched", timeouts.ready)
    facts = operator_facts.observed_operator(reader_api, conformance.operator_namespace)
    admin_facts = operator_facts.observed_operator(api, conformance.operator_namespace)
    assert facts == admin_facts, "the operator reads back differently under the documented permissions"
    found = caps.detect(reader_api, facts.version, facts.effective_feature_gates, simulated_gpus=False)
    assert found.kubernetes_version and found.gateway_api == conformance.capabilities.gateway_api
    assert found.default_storage_classes == conformance.capabilities.default_storage_classes
    files = diagnostics.collect(reader_api, ray.namespace, conformance.operator_namespace, tmp_path)
    refused = [str(f.relative_to(tmp_path)) for f in files if "could not collect" in f.read_text()]
    assert not refused, f"diagnostics refused under the documented permissions: {refused}"
    resources = yaml.safe_load_all((tmp_path / "ray-resources.yaml").read_text())
    assert [r["metadata"]["name"] for r in resources] == ["watched"]
    # Exactly that, not more: the same identity may not read Secrets nor make namespaces.
    with pytest.raises(ApiException) as refused_secrets:
        client.CoreV1Api(reader_api).list_namespaced_secret(ray.namespace)
    assert refused_secrets.value.status == 403

"""Area security: token authentication followed past the head (issue 20).

test_security.py checks that a head-only RayCluster in `authOptions.mode: token` gets a Secret
with `auth_token` and that its dashboard refuses requests without it. These checks follow the token
to everything else KubeRay 1.7.0 gives it to (controllers/ray/common/pod.go, the RayJob submitter
and the operator's own dashboard client): the worker pods (from the same Secret as the head, and
joined to the authenticated cluster), a RayJob's cluster and submitter in each submission mode, a
RayService's cluster (whose Serve HTTP port the token does not cover, as Ray documents: Serve
traffic is the application's), and a Secret the user names in `authOptions.secretName` (1.7.0's
API: "If set, KubeRay will skip generating a Secret object per RayCluster").

The token never reaches a command line, a log or an assertion message: the probes run inside the
pods, read the token there, and print only HTTP status codes and booleans. Each check's docstring
names the KubeRay misbehaviour it exists to catch ("Catches: ...").
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from conformance import capabilities as caps
from conformance.checks import NOT_APPLICABLE
from conformance.kube import rayservice as rs
from conformance.kube.manifests import render
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour, poll_until
from conformance.suites import rayjobs
from conformance.timeouts import Timeouts

pytestmark = pytest.mark.area("security")

TOKEN_KEY = "auth_token"  # KubeRay's utils.RAY_AUTH_TOKEN_SECRET_KEY
TOKEN_ENV, MODE_ENV = "RAY_AUTH_TOKEN", "RAY_AUTH_MODE"
DASHBOARD_PORT, SERVE_PORT = 8265, 8000
JOBS_API = "/api/jobs/"  # the dashboard's job list: 401 without a token, 403 with a wrong one
# The init container KubeRay gives worker pods (it runs `ray health-check` against the GCS, so it
# needs the token as well: pod.go's configureTokenAuth gives it one).
WAIT_GCS_READY = "wait-gcs-ready"
# The token mode checks need Ray's token authentication (2.52) and KubeRay's authOptions (1.6.0).
TOKEN_AUTH = pytest.mark.requires("kuberay>=1.6.0")

# Requests made from inside a pod. Each call is (name, url, token, keep_body): the token is "none",
# "env" (the container's RAY_AUTH_TOKEN), "wrong" (a token that is not it) or "file" (read from
# `token_file`, a Secret the harness mounts itself). Prints status codes and booleans only; a body
# is kept only where asked (Serve's answer, which holds no secret).
PROBE = """
import json, os, urllib.request, urllib.error
env = os.environ.get("RAY_AUTH_TOKEN", "")
named = ""
if {token_file!r}:
    try:
        with open({token_file!r}) as handle:
            named = handle.read().strip()
    except OSError:
        named = ""
tokens = {{"none": "", "env": env, "wrong": (env or named or "x")[::-1] + "x", "file": named}}
out = {{"has_env_token": bool(env), "has_file_token": bool(named), "env_is_file": bool(env) and env == named}}
for name, url, kind, keep_body in {calls!r}:
    request = urllib.request.Request(url)
    if tokens[kind]:
        request.add_header("Authorization", "Bearer " + tokens[kind])
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            out[name] = answer.status
            if keep_body:
                out[name + "_body"] = answer.read(500).decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        out[name] = error.code
    except OSError as error:  # refused or timed out: reported, not a crash of the probe
        out[name] = "unreachable " + type(error).__name__
print("PROBE" + json.dumps(out))
"""

# Run in the head: a task that needs a CPU, which only a worker has (the head starts with num-cpus 0),
# reports the address of the node it ran on; "none" if no node took it in time.
TASK_ON_A_WORKER = """
import ray
ray.init(address="auto", logging_level="ERROR")

@ray.remote(num_cpus=1)
def where():
    return ray.util.get_node_ip_address()

try:
    print("TASK", ray.get(where.remote(), timeout={timeout}))
except ray.exceptions.GetTimeoutError:
    print("TASK", "none")
"""
TASK_TIMEOUT_S = 90


def _requires_token_auth(ray_version: str) -> None:
    if caps.version_tuple(ray_version) < (2, 52, 0):
        pytest.skip(NOT_APPLICABLE + f"Ray {ray_version} predates token authentication (2.52)")


def _with_token_auth(body: dict[str, Any], **options: str) -> dict[str, Any]:
    """A RayCluster spec (or a RayJob's / RayService's) asking for token authentication."""
    body["authOptions"] = {"mode": "token", **options}
    return body


def _env(container: Any) -> dict[str, Any]:
    return {var.name: var for var in container.env or []}


def _token_source(container: Any) -> str:
    """Where a container's RAY_AUTH_TOKEN comes from, in words (never its value)."""
    var = _env(container).get(TOKEN_ENV)
    if var is None:
        return "nowhere (no RAY_AUTH_TOKEN)"
    if var.value:
        return "a literal value written into the pod spec"
    ref = var.value_from.secret_key_ref if var.value_from else None
    if ref is None:
        return "something other than a Secret"
    return f"Secret {ref.name}/{ref.key}"


def _auth_mode(container: Any) -> str:
    var = _env(container).get(MODE_ENV)
    return (var.value or "") if var is not None else "unset"


def _service_url(ray: Ray, service: str, port: int, path: str = "/") -> str:
    return f"http://{service}.{ray.namespace}.svc.cluster.local:{port}{path}"


def _dashboard(ray: Ray, cluster: str) -> str:
    return _service_url(ray, f"{cluster}-head-svc", DASHBOARD_PORT, JOBS_API)


def _probe(
    ray: Ray, pod: client.V1Pod, calls: list[tuple[str, str, str, bool]], token_file: str = ""
) -> dict[str, Any]:
    out = ray.exec(pod, ["python", "-c", PROBE.format(calls=calls, token_file=token_file)], timeout=180)
    if "PROBE" not in out:
        raise RuntimeError(f"the probe in {pod.metadata.name} printed no result: {out[-400:]}")
    return json.loads(out.split("PROBE", 1)[1].strip().splitlines()[0])


def _live(pods: list[client.V1Pod]) -> list[client.V1Pod]:
    return [p for p in pods if p.metadata.deletion_timestamp is None]


# -- workers ------------------------------------------------------------------------------

WORKERS = "authworkers"


@TOKEN_AUTH
def test_workers_take_the_token_from_the_heads_secret_and_join_the_cluster(
    ray: Ray, cluster_values: dict[str, Any], ray_version: str, timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: worker pods of a token-authenticated RayCluster given no RAY_AUTH_TOKEN, a literal
    one, or one from another Secret or key than the head's (their wait-gcs-ready init container
    too), a worker token the head's dashboard refuses, or a worker that never joins the
    authenticated cluster (a task that needs a worker's CPU never runs on it)."""
    _requires_token_auth(ray_version)
    values = {**cluster_values, "name": WORKERS, "workers": [{"name": "small", "replicas": 1}]}
    body = render("ray/raycluster.yaml", **values)
    _with_token_auth(body["spec"])
    started = time.monotonic()
    ray.create("rayclusters", body)
    ray.wait_cluster_ready(WORKERS, timeouts.ready)
    metrics["cluster_ready_s"] = round(time.monotonic() - started, 2)
    head_source = _token_source(ray.head_pod(WORKERS).spec.containers[0])
    assert head_source == f"Secret {WORKERS}/{TOKEN_KEY}", f"the head takes RAY_AUTH_TOKEN from {head_source}"
    workers = _live(ray.pods(WORKERS, "worker"))
    assert len(workers) == 1, f"worker pods: {[p.metadata.name for p in workers]}"
    (worker,) = workers
    inits = [c for c in worker.spec.init_containers or [] if c.name == WAIT_GCS_READY]
    for container in [worker.spec.containers[0], *inits]:
        where = f"worker {worker.metadata.name}, container {container.name}"
        assert _auth_mode(container) == "token", f"{where}: RAY_AUTH_MODE is {_auth_mode(container)!r}"
        source = _token_source(container)
        assert source == head_source, (
            f"{where} takes RAY_AUTH_TOKEN from {source}, the head from {head_source}"
        )
    # The worker's own token is the one the head enforces: the head's dashboard takes it.
    dashboard = _dashboard(ray, WORKERS)
    codes = _probe(
        ray,
        worker,
        [("without_token", dashboard, "none", False), ("with_worker_token", dashboard, "env", False)],
    )
    assert codes["has_env_token"], f"the worker's Ray container has an empty RAY_AUTH_TOKEN: {codes}"
    assert codes["without_token"] == 401, (
        f"the head's dashboard, asked from the worker without a token: {codes}"
    )
    assert codes["with_worker_token"] == 200, f"the head's dashboard refuses the worker's token: {codes}"
    # Joined: the head has no CPU for Ray, so a task asking one can only run on the worker.
    started = time.monotonic()
    out = ray.python_in_head(
        WORKERS, TASK_ON_A_WORKER.format(timeout=TASK_TIMEOUT_S), timeout=TASK_TIMEOUT_S + 60
    )
    ran_on = next((line.split()[1] for line in out.splitlines() if line.startswith("TASK ")), "none")
    metrics["task_on_worker_s"] = round(time.monotonic() - started, 2)
    assert ran_on == worker.status.pod_ip, (
        f"a task needing a worker's CPU ran on {ran_on} within {TASK_TIMEOUT_S}s, not on the worker "
        f"{worker.metadata.name} ({worker.status.pod_ip}): the worker did not join the authenticated cluster"
    )


# -- RayJob, each submission mode -------------------------------------------------------

JOB = "authjob"
SUBMITTER_LOG_MARK = "rayjob-output-ok"  # what rayjobs.SUCCEEDS prints


def _submitter(ray: Ray, job_name: str, mode: str, head: client.V1Pod) -> client.V1Container | None:
    """The container that submits the job: the K8sJobMode Job's, the SidecarMode head's sidecar;
    HTTPMode has none (the operator submits through the dashboard with the Secret's token)."""
    if mode == "K8sJobMode":
        pods = ray.core.list_namespaced_pod(ray.namespace, label_selector=f"job-name={job_name}").items
        assert pods, f"no submitter pod of Job {job_name}"
        return pods[0].spec.containers[0]
    if mode == "SidecarMode":
        sidecars = [c for c in head.spec.containers if "submitter" in c.name]
        assert sidecars, f"the head has no submitter container: {[c.name for c in head.spec.containers]}"
        return sidecars[0]
    return None


def _job_output(ray: Ray, final: dict[str, Any], mode: str, head: client.V1Pod) -> str:
    """The entrypoint's output where each mode keeps it (Ray's job log is read with the head's token)."""
    name = final["metadata"]["name"]
    if mode == "K8sJobMode":
        pods = ray.core.list_namespaced_pod(ray.namespace, label_selector=f"job-name={name}").items
        return "".join(ray.core.read_namespaced_pod_log(p.metadata.name, ray.namespace) for p in pods)
    if mode == "SidecarMode":
        sidecar = next(c.name for c in head.spec.containers if "submitter" in c.name)
        return ray.core.read_namespaced_pod_log(head.metadata.name, ray.namespace, container=sidecar)
    return ray.exec(head, ["ray", "job", "logs", rayjobs.status(final)["jobId"]])


@TOKEN_AUTH
@pytest.mark.parametrize("mode", ["K8sJobMode", "HTTPMode", "SidecarMode"])
def test_rayjob_with_token_auth_completes_in_each_submission_mode(
    mode: str,
    ray: Ray,
    cluster_values: dict[str, Any],
    ray_version: str,
    timeouts: Timeouts,
    metrics: dict[str, float],
) -> None:
    """Catches: a RayJob whose cluster asks for token authentication that never completes in this
    submission mode (its submitter, the K8sJobMode Job or the SidecarMode sidecar, not given the
    token from the cluster's Secret; in HTTPMode the operator not using it), that loses the
    entrypoint's output, or that completes on a cluster answering its job API without a token
    (authOptions lost between the RayJob and its RayCluster)."""
    _requires_token_auth(ray_version)
    body = rayjobs.job(cluster_values, JOB, submissionMode=mode)
    _with_token_auth(body["spec"]["rayClusterSpec"])
    started = time.monotonic()
    job = rayjobs.start(ray, body)
    with behaviour(f"a {mode} RayJob with token authentication completes"):
        final = job.finished(rayjobs.job_timeout(timeouts))
    metrics["job_complete_s"] = round(time.monotonic() - started, 2)
    status = rayjobs.status(final)
    assert status.get("jobDeploymentStatus") == "Complete", (
        f"{rayjobs.brief(status)} (passed through {job.seen})"
    )
    assert status.get("jobStatus") == "SUCCEEDED", rayjobs.brief(status)
    cluster = status["rayClusterName"]
    head = ray.head_pod(cluster)
    dashboard = _dashboard(ray, cluster)
    codes = _probe(
        ray,
        head,
        [("jobs_without_token", dashboard, "none", False), ("jobs_with_token", dashboard, "env", False)],
    )
    assert codes["jobs_without_token"] == 401, (
        f"the RayJob's cluster {cluster} answers its job API without a token (not 401): {codes}"
    )
    assert codes["jobs_with_token"] == 200, f"the job API refuses the head's own token: {codes}"
    expected = f"Secret {cluster}/{TOKEN_KEY}"
    head_source = _token_source(head.spec.containers[0])
    assert head_source == expected, f"the head takes RAY_AUTH_TOKEN from {head_source}, not {expected}"
    submitter = _submitter(ray, JOB, mode, head)
    if submitter is not None:
        source = _token_source(submitter)
        assert source == expected, (
            f"the {mode} submitter ({submitter.name}) takes RAY_AUTH_TOKEN from {source}"
        )
    assert SUBMITTER_LOG_MARK in _job_output(ray, final, mode, head), (
        f"the entrypoint's output is lost ({mode})"
    )


# -- RayService ---------------------------------------------------------------------------

SERVICE = "authsvc"
SERVE_ANSWER_TIMEOUT_S = 120  # Ready to answering: the Serve Service's endpoints follow the head's label


@TOKEN_AUTH
def test_rayservice_with_token_auth_serves_without_the_token_and_guards_its_dashboard(
    ray: Ray, cluster_values: dict[str, Any], ray_version: str, timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Records the status codes Serve and the dashboard gave without a token
    (`serve_without_token_status_code`, `dashboard_without_token_status_code`).

    Catches: a RayService whose cluster asks for token authentication that never becomes Ready
    (the operator not using the Secret's token to deploy the Serve config), whose Serve HTTP port
    (8000, which the token does not cover: documented) refuses requests without the token or
    answers from another cluster than the active one, or whose head's dashboard answers without
    the token (authOptions lost between the RayService and its RayCluster)."""
    _requires_token_auth(ray_version)
    body = render("ray/rayservice.yaml", **rs.rayservice_values(cluster_values, SERVICE))
    _with_token_auth(body["spec"]["rayClusterConfig"])
    rs.create_app(ray)
    started = time.monotonic()
    ray.create("rayservices", body)
    with behaviour("a RayService with token authentication becomes Ready"):
        svc = rs.wait_ready(ray, SERVICE, timeouts.ready)
    metrics["service_ready_s"] = round(time.monotonic() - started, 2)
    cluster = rs.active_cluster(svc)
    head = ray.head_pod(cluster)
    serve = _service_url(ray, f"{SERVICE}-serve-svc", SERVE_PORT)
    dashboard = _dashboard(ray, cluster)
    calls = [
        ("serve_without_token", serve, "none", True),
        ("dashboard_without_token", dashboard, "none", False),
        ("dashboard_with_token", dashboard, "env", False),
    ]
    seen: dict[str, Any] = {}

    def answered() -> dict[str, Any] | None:
        seen.update(_probe(ray, head, calls))
        code = seen.get("serve_without_token")
        # Not yet: no endpoint behind the Service, or Serve's proxy not yet routing (5xx).
        return dict(seen) if isinstance(code, int) and code < 500 else None

    with behaviour("the Serve port of the Ready RayService answers"):
        codes = poll_until(
            answered,
            what=f"{SERVICE}-serve-svc to answer on port {SERVE_PORT}",
            timeout=SERVE_ANSWER_TIMEOUT_S,
            every=3,
            describe=lambda: f"serve: {seen.get('serve_without_token')}",
        )
    for name in ("serve_without_token", "dashboard_without_token"):
        if isinstance(codes.get(name), int):
            metrics[f"{name}_status_code"] = codes[name]
    assert codes["serve_without_token"] == 200, (
        f"Serve (port {SERVE_PORT}), asked without a token, answered {codes['serve_without_token']}: "
        f"Ray's token does not cover Serve, so it must answer: {codes}"
    )
    answer = _json_or_none(codes.get("serve_without_token_body", ""))
    assert answer and answer.get("cluster") == cluster, (
        f"Serve answered from {answer}, not from the active cluster {cluster}"
    )
    assert codes["dashboard_without_token"] == 401, (
        f"the dashboard of the RayService's head answers without a token (not 401), while Serve "
        f"answers {codes['serve_without_token']}: {codes}"
    )
    assert codes["dashboard_with_token"] == 200, f"the dashboard refuses the head's own token: {codes}"
    source = _token_source(head.spec.containers[0])
    assert source == f"Secret {cluster}/{TOKEN_KEY}", (
        f"the active cluster's head takes RAY_AUTH_TOKEN from {source}"
    )


def _json_or_none(text: str) -> dict[str, Any] | None:
    try:
        found = json.loads(text)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


# -- a Secret the user names ------------------------------------------------------------

NAMED = "authnamed"
USER_SECRET = "krc-user-token"
USER_TOKEN_DIR = "/etc/krc-user-token"  # the harness's own mount of the named Secret, for the probe


def _user_secret(ray: Ray) -> str:
    """Make the user's Secret with a fresh token; return the token's SHA-256 (the token stays here)."""
    token = secrets.token_urlsafe(32)
    body = {"metadata": {"name": USER_SECRET}, "type": "Opaque", "stringData": {TOKEN_KEY: token}}
    ray.core.create_namespaced_secret(ray.namespace, body)
    return hashlib.sha256(token.encode()).hexdigest()


def _fingerprint(secret: client.V1Secret) -> str:
    data = (secret.data or {}).get(TOKEN_KEY, "")
    return hashlib.sha256(base64.b64decode(data)).hexdigest() if data else ""


def _secrets_kuberay_made(ray: Ray, cluster: str) -> list[str]:
    """Secrets KubeRay 1.7.0 makes for a token cluster: named after it (utils.CheckName), labelled with it."""
    labelled = ray.core.list_namespaced_secret(
        ray.namespace, label_selector=f"ray.io/cluster={cluster}"
    ).items
    names = {s.metadata.name for s in labelled}
    try:
        ray.core.read_namespaced_secret(cluster, ray.namespace)
        names.add(cluster)
    except ApiException as exc:
        if exc.status != 404:
            raise
    return sorted(names)


# secretName is read in the APIs of 1.6.2 and 1.7.0 (the oldest release checked; 1.6.0 and 1.6.1 were not).
@pytest.mark.requires("kuberay>=1.6.2")
def test_token_auth_uses_the_secret_named_in_auth_options(
    ray: Ray, cluster_values: dict[str, Any], ray_version: str, timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: `authOptions.secretName` ignored: KubeRay generating a Secret of its own anyway,
    RAY_AUTH_TOKEN wired to another Secret than the named one, Ray enforcing another token than the
    named Secret's, or KubeRay taking the user's Secret over (an owner reference: deleted with the
    cluster) or rewriting its token."""
    _requires_token_auth(ray_version)
    fingerprint = _user_secret(ray)
    body = render("ray/raycluster.yaml", **{**cluster_values, "name": NAMED})
    _with_token_auth(body["spec"], secretName=USER_SECRET)
    pod = body["spec"]["headGroupSpec"]["template"]["spec"]
    pod.setdefault("volumes", []).append({"name": "krc-user-token", "secret": {"secretName": USER_SECRET}})
    pod["containers"][0].setdefault("volumeMounts", []).append(
        {"name": "krc-user-token", "mountPath": USER_TOKEN_DIR, "readOnly": True}
    )
    started = time.monotonic()
    ray.create("rayclusters", body)
    ray.wait_cluster_ready(NAMED, timeouts.ready)
    metrics["cluster_ready_s"] = round(time.monotonic() - started, 2)
    head = ray.head_pod(NAMED)
    made = _secrets_kuberay_made(ray, NAMED)
    assert not made, f"KubeRay made a Secret of its own although authOptions names {USER_SECRET}: {made}"
    source = _token_source(head.spec.containers[0])
    assert source == f"Secret {USER_SECRET}/{TOKEN_KEY}", f"the head takes RAY_AUTH_TOKEN from {source}"
    dashboard = _dashboard(ray, NAMED)
    calls = [
        ("with_named_token", dashboard, "file", False),
        ("without_token", dashboard, "none", False),
        ("with_wrong_token", dashboard, "wrong", False),
    ]
    codes = _probe(ray, head, calls, token_file=f"{USER_TOKEN_DIR}/{TOKEN_KEY}")
    if not codes["has_file_token"]:
        raise RuntimeError(f"the harness's own mount of Secret {USER_SECRET} in the head is empty: {codes}")
    assert codes["without_token"] == 401, f"the dashboard answers without a token (not 401): {codes}"
    assert codes["with_wrong_token"] == 403, f"the dashboard, with a wrong token (not 403): {codes}"
    assert codes["with_named_token"] == 200, f"the dashboard refuses the named Secret's token: {codes}"
    assert codes["env_is_file"], f"the head's RAY_AUTH_TOKEN is not the named Secret's token: {codes}"
    user = ray.core.read_namespaced_secret(USER_SECRET, ray.namespace)
    owners = [(o.kind, o.name) for o in user.metadata.owner_references or []]
    assert not owners, f"the user's Secret {USER_SECRET} was given owners {owners}: it goes with them"
    kept = _fingerprint(user) == fingerprint
    assert kept, f"the token in the user's Secret {USER_SECRET} was changed"

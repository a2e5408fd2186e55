"""Install the KubeRay operator the way its Helm chart does by default, and read back what runs.

Where the defaults come from (KubeRay repository, tag `ray-operator/v1.7.0` = `v1.7.0`,
commit 59d663aeec13760646da3db9c1cf8cfe883e30b7; the same files at `ray-operator/v1.6.1`
(c9ddfc24) and `ray-operator/v1.6.2` (598eb66a), whose chart differs from v1.6.1 only in the
image tag; the deployment template is the same in all three):

- `helm-chart/kuberay-operator/values.yaml`: the `featureGates` list (`CHART_FEATURE_GATES`),
  `leaderElectionEnabled: true`, `logging.stdoutEncoder`/`fileEncoder: json`,
  `metrics.enabled: true`, `reconcileConcurrency: 1`, `kubeClient.qps: 100.0`, `burst: 200`,
  the probes (10 s delay, 5 s period, 5 failures) and the security context.
- `helm-chart/kuberay-operator/templates/deployment.yaml` and `_helpers.tpl`
  (`kuberay.featureGates`): which of those values become arguments and in which order
  (`chart_args`), `/manager` as the command, probes on `/metrics` at port `http` (8080).
- `ray-operator/pkg/features/features.go`: the binary's own gate defaults
  (`BINARY_FEATURE_GATES`); a gate the chart does not name keeps this default.
- `ray-operator/main.go` and `apis/config/v1alpha1/defaults.go`: flag names, metrics on :8080,
  health probe on :8082, leader election on by default with lease `ray-operator-leader` in the
  operator's namespace unless `--leader-election-namespace`; `--watch-namespace` is a comma list.
- `ray-operator/config/crd/bases/*.yaml` and `config/rbac/` (the files its kustomization.yaml
  lists): the CRDs and the ClusterRole and leader-election Role, taken from the Go module the
  operator binary is built from, so that objects and binary always match.

`install_local` is for clusters without a registry (the local provider): the operator image is
built here from the binary `gobuild` made and imported into the node. The Helm chart itself
(from a checkout or from the KubeRay Helm repository) is installed by `kuberay_chart`.
"""

from __future__ import annotations

import json
import re
import string
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from conformance import resources
from conformance.build import gobuild, image_cache, pins, small_images
from conformance.build.cache import cache_dir
from conformance.errors import ProvisioningError, UsageError
from conformance.kube.apply import MANAGED_BY, api_reason, apply_crds, apply_object, ensure_namespace
from conformance.kube.rollout import deployment_available, describe_deployment
from conformance.kube.wait import WaitTimeout, wait_for, wait_gone
from conformance.progress import progress

DEFAULT_VERSION = pins.KUBERAY
OPERATOR_MODULE = "github.com/ray-project/kuberay/ray-operator"
HELM_REPO = "https://ray-project.github.io/kuberay-helm/"
NAME = "kuberay-operator"  # Deployment, ServiceAccount, Service, ClusterRole(Binding): the chart's names
LEADER_ELECTION_ROLE = "kuberay-operator-leader-election"
LEASE_NAME = "ray-operator-leader"  # LeaderElectionID in main.go
MANIFEST = resources.path("manifests") / "kuberay" / "operator.yaml"
RAY_KINDS = ("rayclusters", "rayjobs", "rayservices", "raycronjobs")
POD_SELECTOR = f"app.kubernetes.io/name={NAME},app.kubernetes.io/instance={NAME}"

# The chart's `featureGates` list, in its order (the order of the rendered --feature-gates).
CHART_FEATURE_GATES: dict[str, tuple[tuple[str, bool], ...]] = {
    "v1.7.0": (
        ("RayClusterStatusConditions", True),
        ("RayJobDeletionPolicy", True),
        ("RayMultiHostIndexing", True),
        ("RayServiceIncrementalUpgrade", True),
        ("RayCronJob", False),
        ("RayClusterMTLS", False),
        ("RayClusterNetworkPolicy", False),
        ("RayClusterHistoryServer", False),
    ),
    "v1.6.1": (
        ("RayClusterStatusConditions", True),
        ("RayJobDeletionPolicy", True),
        ("RayMultiHostIndexing", True),
        ("RayServiceIncrementalUpgrade", False),
        ("RayCronJob", False),
    ),
}
CHART_FEATURE_GATES["v1.6.2"] = CHART_FEATURE_GATES["v1.6.1"]  # v1.6.2 changed only the image tag
# The previous minor, for the operator-upgrade check (tag v1.5.1; v1.5.2's go.mod has no
# checksum-database entry, so the Go toolchain refuses it here).
CHART_FEATURE_GATES["v1.5.1"] = (
    ("RayClusterStatusConditions", True),
    ("RayJobDeletionPolicy", False),
    ("RayMultiHostIndexing", False),
    ("RayServiceIncrementalUpgrade", False),
)

# Every gate the binary knows with its default (defaultFeatureGates in features.go). The binary
# exits on a gate it does not know, so these also say which gates a version accepts.
BINARY_FEATURE_GATES: dict[str, dict[str, bool]] = {
    "v1.7.0": {
        "RayClusterStatusConditions": True,
        "RayJobDeletionPolicy": True,
        "RayMultiHostIndexing": True,
        "RayServiceIncrementalUpgrade": True,
        "RayCronJob": False,
        "SidecarSubmitterRestart": False,
        "RayClusterNetworkPolicy": False,
        "GCSFaultToleranceEmbeddedStorage": False,
        "RayClusterMTLS": False,
        "RayClusterHistoryServer": False,
        "KubernetesWAS": False,
    },
    "v1.6.1": {
        "RayClusterStatusConditions": True,
        "RayJobDeletionPolicy": True,
        "RayMultiHostIndexing": True,
        "RayServiceIncrementalUpgrade": False,
        "RayCronJob": False,
        "AsyncJobInfoQuery": False,
    },
}
BINARY_FEATURE_GATES["v1.6.2"] = BINARY_FEATURE_GATES["v1.6.1"]
BINARY_FEATURE_GATES["v1.5.1"] = dict(CHART_FEATURE_GATES["v1.5.1"])
# Charts before 1.6 render --feature-gates first, ahead of every other argument.
_GATES_FIRST_BEFORE = (1, 6)

# The operator's boolean flags: Go's flag package never takes their value from the next argument.
_BOOL_FLAGS = frozenset(
    {
        "enable-leader-election",
        "forced-cluster-upgrade",
        "enable-batch-scheduler",
        "use-kubernetes-proxy",
        "enable-metrics",
        "zap-devel",
    }
)
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_VERSION = re.compile(r"v\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?")
_TAG_VERSION = re.compile(r"v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class OperatorNotReady(ProvisioningError):
    """The operator's Deployment did not become available, or no pod of it took the lease.

    While the environment is prepared this is the environment's problem; where a check changes
    the operator on purpose (an upgrade), the check turns it into a failure of the version under test.
    """


class ImageLoader(Protocol):
    """What `install_local` needs of a provider: a way to put a locally built image on the node."""

    def load_image(self, archive: image_cache.ImageArchive) -> None: ...


# --- the spec and its arguments (pure) ---------------------------------------------------


def chart_feature_gates(version: str) -> dict[str, bool]:
    """The gates the chart of `version` passes by default, in the chart's order."""
    if version not in CHART_FEATURE_GATES:
        raise UsageError(
            f"no recorded Helm chart defaults for KubeRay {version}",
            "pass feature_gates explicitly, or add the version to CHART_FEATURE_GATES in "
            "conformance/install/kuberay.py from its helm-chart/kuberay-operator/values.yaml",
        )
    return dict(CHART_FEATURE_GATES[version])


@dataclass(frozen=True)
class OperatorSpec:
    """Which operator to install and how; the defaults are those of the Helm chart of `version`.

    `feature_gates` left as None becomes the chart's default list for `version`.
    """

    version: str = DEFAULT_VERSION
    namespace: str = "kuberay-system"
    feature_gates: dict[str, bool] = field(default=None, hash=False)  # type: ignore[assignment]
    watch_namespaces: tuple[str, ...] = ()  # empty: every namespace
    leader_election: bool = True
    # The gates the binary knows, when read from its source (a checkout's features.go); empty:
    # those BINARY_FEATURE_GATES records for `version`.
    known_gates: tuple[str, ...] = ()
    # Set on top of the chart's defaults: container environment variables the operator reads, and
    # arguments after the chart's (Go's flag package: a repeated flag's last value wins).
    env: dict[str, str] = field(default_factory=dict, hash=False)
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _VERSION.fullmatch(self.version):
            raise UsageError(
                f"KubeRay version {self.version!r} is not a tag", "write it as vX.Y.Z, e.g. v1.7.0"
            )
        for name in (self.namespace, *self.watch_namespaces):
            if not _DNS_LABEL.fullmatch(name):
                raise UsageError(f"{name!r} is not a namespace name", "use lowercase letters, digits and '-'")
        gates = chart_feature_gates(self.version) if self.feature_gates is None else dict(self.feature_gates)
        object.__setattr__(self, "feature_gates", gates)
        object.__setattr__(self, "watch_namespaces", tuple(self.watch_namespaces))
        known = self.known_gates or tuple(BINARY_FEATURE_GATES.get(self.version, gates))
        unknown = sorted(set(gates) - set(known))
        if unknown:
            # The operator would exit at start with "unrecognized feature gate".
            raise UsageError(
                f"KubeRay {self.version} has no feature gate {', '.join(unknown)}",
                f"use one of: {', '.join(sorted(known))}",
            )

    def with_gates(self, **gates: bool) -> OperatorSpec:
        """A copy with some gates changed, e.g. `spec.with_gates(RayCronJob=True)`."""
        return replace(self, feature_gates={**self.feature_gates, **gates})


def feature_gates_arg(gates: Mapping[str, bool]) -> str:
    """`--feature-gates=A=true,B=false`, in the given order, as the chart's helper renders it."""
    return "--feature-gates=" + ",".join(f"{name}={str(on).lower()}" for name, on in gates.items())


def chart_args(spec: OperatorSpec) -> list[str]:
    """The container args the chart renders for `spec` with every other value at its default.

    Order follows templates/deployment.yaml: watch namespace, log encoders, leader election,
    metrics, reconcile concurrency, qps, burst, feature gates (first of all before 1.6).
    """
    args: list[str] = []
    gates_first = _semver(spec.version)[:2] < _GATES_FIRST_BEFORE
    if spec.feature_gates and gates_first:
        args.append(feature_gates_arg(spec.feature_gates))
    if spec.watch_namespaces:
        args += ["--watch-namespace", ",".join(spec.watch_namespaces)]
    args += ["--log-stdout-encoder", "json", "--log-file-encoder", "json"]
    args += [
        f"--enable-leader-election={str(spec.leader_election).lower()}",
        "--enable-metrics=true",
        "--reconcile-concurrency=1",
        "--qps=100",  # Helm prints the float 100.0 with %v
        "--burst=200",
    ]
    if spec.feature_gates and not gates_first:
        args.append(feature_gates_arg(spec.feature_gates))
    return args + list(spec.extra_args)


def _semver(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


# --- reading args back (pure) -------------------------------------------------------------


@dataclass(frozen=True)
class OperatorArgs:
    """The operator's command line as Go's flag package would read it."""

    flags: dict[str, str] = field(hash=False)
    feature_gates: dict[str, bool] = field(hash=False)  # only those named on the command line
    leader_election: bool  # main.go's default (true) when the flag is absent
    watch_namespaces: tuple[str, ...]  # empty: every namespace
    leader_election_namespace: str  # empty: the operator's own namespace
    config_file: str  # with --config, flags are ignored and a ConfigMap holds the settings


def parse_go_bool(text: str) -> bool:
    """strconv.ParseBool, which is what both `flag` and the feature-gate parser use."""
    if text in _GO_TRUE:
        return True
    if text in _GO_FALSE:
        return False
    raise ValueError(f"not a Go boolean: {text!r}")


def parse_feature_gates(value: str) -> dict[str, bool]:
    """`A=true, B=false` -> {"A": True, "B": False}, as featuregate.Set reads it."""
    gates: dict[str, bool] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        name, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"feature gate {item!r} has no value")
        gates[name.strip()] = parse_go_bool(raw.strip())
    return gates


def parse_flags(argv: Sequence[str]) -> dict[str, str]:
    """Go `flag` parsing: -x or --x, `=value` or the next argument; stops at `--` or a non-flag."""
    flags: dict[str, str] = {}
    index = 0
    while index < len(argv):
        token = argv[index]
        if token == "--" or not token.startswith("-") or token == "-":
            break
        name, sep, value = token.lstrip("-").partition("=")
        if not sep:
            if name in _BOOL_FLAGS:
                value = "true"
            elif index + 1 < len(argv):
                index += 1
                value = argv[index]
        flags[name] = value
        index += 1
    return flags


def parse_operator_args(argv: Sequence[str]) -> OperatorArgs:
    flags = parse_flags(argv)
    watch = tuple(ns for ns in flags.get("watch-namespace", "").split(",") if ns)
    return OperatorArgs(
        flags=flags,
        feature_gates=parse_feature_gates(flags.get("feature-gates", "")),
        leader_election=parse_go_bool(flags.get("enable-leader-election", "true")),
        watch_namespaces=watch,
        leader_election_namespace=flags.get("leader-election-namespace", ""),
        config_file=flags.get("config", ""),
    )


def effective_feature_gates(version: str, explicit: Mapping[str, bool]) -> dict[str, bool]:
    """What the binary runs with: its own defaults (when we know the version) overlaid by the args."""
    return {**BINARY_FEATURE_GATES.get(version, {}), **explicit}


def version_from_image(image: str) -> str:
    """`quay.io/kuberay/operator:v1.7.0` -> `v1.7.0`; "" when the tag is no version (or absent).

    An image built from a checkout is tagged `<version>-src.<tree hash>` (kuberay_source.image_tag):
    its version is the checkout's.
    """
    reference = image.split("@", 1)[0]
    last = reference.rsplit("/", 1)[-1]
    _, sep, tag = last.partition(":")
    match = _TAG_VERSION.fullmatch(re.sub(r"-src\.[0-9a-f]+$", "", tag)) if sep else None
    return f"v{match.group(1)}" if match else ""


def served_versions(crd: Mapping[str, Any]) -> tuple[str, ...]:
    """The versions a CRD serves, in its own order."""
    return tuple(v["name"] for v in crd.get("spec", {}).get("versions", []) if v.get("served"))


def holder_pod(identity: str) -> str:
    """The pod in a controller-runtime leader identity, `<hostname>_<uuid>` (a pod's hostname is its name)."""
    return identity.split("_", 1)[0]


def lease_is_held(holder: str, renew_time: datetime | None, duration_s: int | None, now: datetime) -> bool:
    """A lease is held while it has a holder and its last renewal is younger than its duration."""
    if not holder or renew_time is None or not duration_s:
        return False
    return (now - renew_time).total_seconds() < duration_s


# --- rendering (pure) -----------------------------------------------------------------------


def render_operator(
    spec: OperatorSpec, image: str, image_build: str = "", manifest: Path = MANIFEST
) -> list[dict]:
    """The ServiceAccount, bindings, Service and Deployment of manifests/kuberay/operator.yaml."""
    if not manifest.is_file():
        raise ProvisioningError(
            f"the operator template {manifest} is missing", "run from a checkout of the repo"
        )
    text = string.Template(manifest.read_text()).substitute(
        NAMESPACE=spec.namespace,
        IMAGE=image,
        VERSION=spec.version,
        MANAGED_BY=MANAGED_BY,
        ARGS=json.dumps(chart_args(spec)),  # a JSON list is a YAML flow sequence
    )
    docs = [doc for doc in yaml.safe_load_all(text) if doc]
    for doc in docs:
        if doc["kind"] == "Deployment" and spec.env:
            container = doc["spec"]["template"]["spec"]["containers"][0]
            container["env"] = [{"name": name, "value": value} for name, value in spec.env.items()]
    if image_build:
        # A rebuilt binary keeps its tag; a changed annotation makes the Deployment roll anyway.
        for doc in docs:
            if doc["kind"] == "Deployment":
                template_meta = doc["spec"]["template"]["metadata"]
                template_meta.setdefault("annotations", {})["kuberay-conformance.io/image-build"] = (
                    image_build
                )
    return docs


def _labelled(doc: dict, spec: OperatorSpec) -> dict:
    labels = doc.setdefault("metadata", {}).setdefault("labels", {})
    labels.update({"app.kubernetes.io/managed-by": MANAGED_BY, "app.kubernetes.io/version": spec.version})
    return doc


def rbac_roles(rbac_dir: Path, spec: OperatorSpec) -> list[dict]:
    """The ClusterRole and Role of the module's config/rbac, as its kustomization.yaml lists them.

    Bindings and the ServiceAccount come from our template, bound to our namespace.
    """
    kustomization = yaml.safe_load((rbac_dir / "kustomization.yaml").read_text())
    roles: list[dict] = []
    for resource in kustomization.get("resources", []):
        for doc in yaml.safe_load_all((rbac_dir / resource).read_text()):
            if not doc or doc.get("kind") not in ("ClusterRole", "Role"):
                continue
            if doc["kind"] == "Role":
                doc["metadata"]["namespace"] = spec.namespace
            elif doc["metadata"]["name"] == NAME and spec.feature_gates.get("KubernetesWAS"):
                # The chart adds this rule when the gate is on (role.consistentRules in _helpers.tpl).
                doc["rules"].append(
                    {
                        "apiGroups": ["scheduling.k8s.io"],
                        "resources": ["podgroups", "workloads"],
                        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                    }
                )
            roles.append(_labelled(doc, spec))
    return roles


def crd_documents(crd_dir: Path) -> list[dict]:
    docs = [
        doc for path in sorted(crd_dir.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc
    ]
    return [doc for doc in docs if doc.get("kind") == "CustomResourceDefinition"]


# --- where the binary, the image and the module files come from --------------------------------


def operator_tool(version: str) -> pins.GoTool:
    """The build recipe of `version`: the pinned one, with another version where asked."""
    tool = pins.TOOLS["kuberay"]
    return tool if tool.version == version else replace(tool, version=version)


def operator_image(version: str) -> image_cache.ImageArchive:
    """The operator image for `version`, built from the Go build cache (built first if missing)."""
    cache = cache_dir()
    bin_dir = gobuild.ensure_built(operator_tool(version), cache)
    return small_images.binary_image(cache, NAME, version, bin_dir / "kuberay-operator", ["/manager"])


def module_dir(version: str) -> Path:
    """Where the Go module cache holds the operator module's files (CRDs, RBAC) for `version`."""
    return gobuild.module_dir(OPERATOR_MODULE, version)


# --- applying ----------------------------------------------------------------------------------


def install_local(provider: ImageLoader, api_client: client.ApiClient, spec: OperatorSpec) -> None:
    """Install the operator from an image built on this machine; `wait_ready` waits for it.

    Idempotent: a second call re-applies the same objects, and a rebuilt binary rolls the pod.
    """
    archive = operator_image(spec.version)
    provider.load_image(archive)
    module = module_dir(spec.version)
    ensure_namespace(client.CoreV1Api(api_client), spec.namespace)
    apply_crds(api_client, crd_documents(module / "config" / "crd" / "bases"))
    dynamic = DynamicClient(api_client)
    objects = rbac_roles(module / "config" / "rbac", spec)
    objects += render_operator(spec, archive.ref, image_build=archive.path.parent.name)
    with progress(f"applying the KubeRay {spec.version} operator to {spec.namespace}") as line:
        for doc in objects:
            line.update(f"{doc['kind']}/{doc['metadata']['name']}")
            apply_object(dynamic, doc)


# --- waiting and reading back ------------------------------------------------------------------


def _operator_pods(core: client.CoreV1Api, namespace: str, selector: str, image: str = "") -> set[str]:
    """Current (not terminating) pods, of `image` when given."""
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return {
        pod.metadata.name
        for pod in pods
        if pod.metadata.deletion_timestamp is None and (not image or image in _images(pod))
    }


def _images(pod: Any) -> list[str]:
    return [c.image for c in pod.spec.containers]


def lease_held_by(lease: Any, pods: set[str]) -> bool:
    # After a restart the old pod's lease looks fresh until it expires: the holder must be a current pod.
    return _lease_held_now(lease) and holder_pod(lease.spec.holder_identity or "") in pods


def _lease_held_now(lease: Any) -> bool:
    spec = lease.spec
    return lease_is_held(
        spec.holder_identity or "", spec.renew_time, spec.lease_duration_seconds, datetime.now(UTC)
    )


def _pod_problems(core: client.CoreV1Api, namespace: str) -> str:
    """Why operator pods are not ready, from their container states (for the error's cause)."""
    problems = []
    selector = _deployment_selector(client.AppsV1Api(core.api_client), namespace)
    for pod in core.list_namespaced_pod(namespace, label_selector=selector).items:
        for status in pod.status.container_statuses or []:
            waiting = status.state.waiting if status.state else None
            if waiting:
                problems.append(f"{pod.metadata.name}: {waiting.reason} {waiting.message or ''}".strip())
            elif status.restart_count:
                problems.append(f"{pod.metadata.name}: restarted {status.restart_count} times")
        if not pod.status.container_statuses:
            problems.append(f"{pod.metadata.name}: {pod.status.phase}")
    return "; ".join(problems) or "no operator pod"


def wait_ready(api_client: client.ApiClient, spec: OperatorSpec, timeout: float, image: str = "") -> None:
    """Wait until the Deployment is available and, with leader election, the lease is held (by a
    pod running `image`, when given: after a version change the old pod may still hold it).

    The lease matters: controllers start only after the operator becomes the leader.
    """
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    deadline = _now_s() + timeout
    fix = f"see `kubectl -n {spec.namespace} logs deploy/{NAME}` and `kubectl -n {spec.namespace} get events`"
    try:
        wait_for(
            apps.list_namespaced_deployment,
            deployment_available,
            what=f"deployment {spec.namespace}/{NAME} available",
            timeout=timeout,
            describe=describe_deployment,
            namespace=spec.namespace,
            field_selector=f"metadata.name={NAME}",
        )
        selector = _deployment_selector(apps, spec.namespace)  # the chart's labels, or kustomize's
        if spec.leader_election:
            wait_for(
                client.CoordinationV1Api(api_client).list_namespaced_lease,
                lambda lease: lease_held_by(lease, _operator_pods(core, spec.namespace, selector, image)),
                what=f"lease {spec.namespace}/{LEASE_NAME} held",
                timeout=max(1.0, deadline - _now_s()),
                describe=lambda lease: f"holder {lease.spec.holder_identity or 'none'}",
                namespace=spec.namespace,
                field_selector=f"metadata.name={LEASE_NAME}",
            )
    except WaitTimeout as exc:
        raise OperatorNotReady(
            f"the KubeRay operator was not ready within {timeout:.0f}s ({exc.last_seen}; "
            f"{_pod_problems(core, spec.namespace)})",
            fix,
        ) from exc


def _now_s() -> float:
    return time.monotonic()


@dataclass(frozen=True)
class OperatorFacts:
    """What runs in the cluster, read back rather than trusted from the spec we asked for."""

    namespace: str
    deployment: str
    image: str
    version: str  # from the image tag; "" when the tag is not a version
    args: tuple[str, ...]
    feature_gates: dict[str, bool] = field(hash=False)  # as named in the args
    effective_feature_gates: dict[str, bool] = field(hash=False)  # binary defaults + args (known versions)
    leader_election: bool
    watch_namespaces: tuple[str, ...]  # empty: every namespace
    ready_replicas: int
    served_crd_versions: dict[str, tuple[str, ...]] = field(hash=False)  # "rayclusters" -> ("v1", ...)
    lease_holder: str  # the leader's identity, `<pod>_<uuid>`
    lease_held: bool  # renewed within its duration by a current pod of this Deployment


def _find_operator(apps: client.AppsV1Api, namespace: str) -> tuple[Any, Any]:
    for dep in apps.list_namespaced_deployment(namespace).items:
        for container in dep.spec.template.spec.containers:
            if container.name == NAME or "kuberay/operator" in (container.image or ""):
                return dep, container
    raise ProvisioningError(
        f"no KubeRay operator Deployment in namespace {namespace}",
        "install it first (install_local or kuberay_chart.install_chart), or name the namespace it runs in",
    )


def _selector(dep: Any) -> str:
    return ",".join(f"{k}={v}" for k, v in (dep.spec.selector.match_labels or {}).items())


def _running_image(core: client.CoreV1Api, dep: Any, container: Any) -> str:
    """The image a ready operator pod runs, falling back to the Deployment's when none is up."""
    for pod in core.list_namespaced_pod(dep.metadata.namespace, label_selector=_selector(dep)).items:
        for status in pod.status.container_statuses or []:
            if status.name == container.name and status.ready:
                return status.image
    return container.image


def _served_crd_versions(ext: client.ApiextensionsV1Api) -> dict[str, tuple[str, ...]]:
    served: dict[str, tuple[str, ...]] = {}
    for plural in RAY_KINDS:
        try:
            crd = ext.read_custom_resource_definition(f"{plural}.ray.io")
        except ApiException as exc:
            if exc.status != 404:
                raise
            continue
        served[plural] = served_versions(api_to_dict(crd))
    return served


def api_to_dict(obj: Any) -> dict:
    return client.ApiClient().sanitize_for_serialization(obj)


def _lease(coordination: client.CoordinationV1Api, namespace: str, pods: set[str]) -> tuple[str, bool]:
    try:
        lease = coordination.read_namespaced_lease(LEASE_NAME, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return "", False
        raise
    return lease.spec.holder_identity or "", lease_held_by(lease, pods)


def observed_operator(api_client: client.ApiClient, namespace: str) -> OperatorFacts:
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    dep, container = _find_operator(apps, namespace)
    argv = [*(container.command or [])[1:], *(container.args or [])]
    parsed = parse_operator_args(argv)
    image = _running_image(core, dep, container)
    version = version_from_image(image) or version_from_image(container.image or "")
    pods = _operator_pods(core, namespace, _selector(dep))
    lease_namespace = parsed.leader_election_namespace or namespace
    holder, held = _lease(client.CoordinationV1Api(api_client), lease_namespace, pods)
    return OperatorFacts(
        namespace=namespace,
        deployment=dep.metadata.name,
        image=image,
        version=version,
        args=tuple(argv),
        feature_gates=parsed.feature_gates,
        effective_feature_gates=effective_feature_gates(version, parsed.feature_gates),
        leader_election=parsed.leader_election,
        watch_namespaces=parsed.watch_namespaces,
        ready_replicas=dep.status.ready_replicas or 0,
        served_crd_versions=_served_crd_versions(client.ApiextensionsV1Api(api_client)),
        lease_holder=holder,
        lease_held=held,
    )


# --- removing ----------------------------------------------------------------------------------


def _delete(call: Any, *args: str, **kwargs: Any) -> None:
    try:
        call(*args, **kwargs)
    except ApiException as exc:
        if exc.status != 404:
            raise ProvisioningError(
                f"deleting {args[0]} failed: {api_reason(exc)}", "check the kubeconfig user's RBAC and retry"
            ) from exc


def uninstall_local(
    api_client: client.ApiClient, spec: OperatorSpec, *, remove_crds: bool = False, timeout: float = 120.0
) -> None:
    """Remove what `install_local` made; the CRDs only when asked (that deletes every Ray object)."""
    core = client.CoreV1Api(api_client)
    ns = spec.namespace
    remove_operator_objects(api_client, ns, timeout)
    if remove_crds:
        ext = client.ApiextensionsV1Api(api_client)
        for plural in RAY_KINDS:
            _delete(ext.delete_custom_resource_definition, f"{plural}.ray.io")
    try:
        labels = core.read_namespace(ns).metadata.labels or {}
    except ApiException as exc:
        if exc.status == 404:
            return
        raise
    if labels.get("app.kubernetes.io/managed-by") == MANAGED_BY:
        _delete(core.delete_namespace, ns)
        # A namespace still terminating refuses new objects: the next install must find it gone.
        try:
            wait_gone(
                core.list_namespace,
                what=f"namespace {ns}",
                timeout=timeout,
                field_selector=f"metadata.name={ns}",
            )
        except WaitTimeout as exc:
            raise ProvisioningError(
                f"namespace {ns} was not removed: {exc.last_seen}", "see its finalizers"
            ) from exc


def remove_operator_objects(api_client: client.ApiClient, ns: str, timeout: float = 120.0) -> None:
    """Delete the operator's Deployment (waiting for its pods), Service, RBAC, lease and
    ServiceAccount by their names, which the hand-made objects and a kustomize deploy share;
    the CRDs, the namespace and the Ray objects stay."""
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    rbac = client.RbacAuthorizationV1Api(api_client)
    selector = _deployment_selector(apps, ns)
    _delete(apps.delete_namespaced_deployment, NAME, ns, propagation_policy="Foreground")
    try:
        wait_gone(
            core.list_namespaced_pod,
            what="the operator pods",
            timeout=timeout,
            namespace=ns,
            label_selector=selector,
        )
    except WaitTimeout as exc:
        raise ProvisioningError(
            f"operator pods in {ns} were not removed: {exc.last_seen}", "see the node"
        ) from exc
    _delete(core.delete_namespaced_service, NAME, ns)
    _delete(rbac.delete_namespaced_role_binding, LEADER_ELECTION_ROLE, ns)
    _delete(rbac.delete_namespaced_role, LEADER_ELECTION_ROLE, ns)
    # A stopped operator keeps its lease until it expires; the next install should not wait for that.
    _delete(client.CoordinationV1Api(api_client).delete_namespaced_lease, LEASE_NAME, ns)
    _delete(core.delete_namespaced_service_account, NAME, ns)
    _delete(rbac.delete_cluster_role_binding, NAME)
    _delete(rbac.delete_cluster_role, NAME)


def operator_selector(api_client: client.ApiClient, ns: str) -> str:
    return _deployment_selector(client.AppsV1Api(api_client), ns)


def _deployment_selector(apps: client.AppsV1Api, ns: str) -> str:
    """The selector of the operator Deployment's pods (the chart's, or kustomize's other labels)."""
    try:
        return _selector(apps.read_namespaced_deployment(NAME, ns))
    except ApiException as exc:
        if exc.status != 404:
            raise
    return POD_SELECTOR


# The same applying and waiting serve the other installers (the Gateway API implementation).


def with_version(facts: OperatorFacts, version: str, binary_gates: Mapping[str, bool]) -> OperatorFacts:
    """`facts` of an operator whose version its image tag does not say plainly (a source build):
    the version and binary defaults come from its source."""
    effective = {**binary_gates, **facts.feature_gates}
    return replace(facts, version=version, effective_feature_gates=effective)

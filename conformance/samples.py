"""KubeRay's own sample manifests, read from the version under test, and what each one needs.

Users start from the YAML files KubeRay ships in `ray-operator/config/samples/`, so the `samples`
area applies those files, taken from the checkout or the Go module of the KubeRay under test
(never from a copy kept here). Three things are changed, as a cluster without a registry needs:
the `rayproject/ray` images become the profile's Ray image (and `rayVersion` its version), the
Ray containers get the profile's resources, and `redis` images become the profile's Redis.
Nothing else: a sample's commands, ports, services and runtime environments are applied as
they are.

Whether a sample can run here is decided from its content against what the cluster offers
(`Offer`): images no node holds on a cluster that cannot pull, resources no node has, APIs the
cluster does not serve, alpha fields whose feature gate is off, a batch scheduler the operator
does not run, Secrets and ConfigMaps the sample expects to exist, and downloads (pip, a
`working_dir` URL) on a cluster whose pods cannot reach the internet. A sample needing any of
these is not applicable with the reasons; there is no list of file names.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from conformance.errors import HarnessError

SAMPLES_DIR = Path("config") / "samples"  # inside the ray-operator module
# The kind a sample is checked as, when a file holds several (a RayJob with its own RayCluster).
RAY_KINDS = ("RayService", "RayJob", "RayCluster")
# Where each Ray kind keeps its RayCluster spec.
CLUSTER_SPEC_PATH = {
    "RayCluster": ("spec",),
    "RayJob": ("spec", "rayClusterSpec"),
    "RayService": ("spec", "rayClusterConfig"),
}
# `rayproject/ray` only: ray-ml and ray-llm images carry the ML stacks their samples need.
_RAY_IMAGE = re.compile(r"^(docker\.io/)?rayproject/ray:")
_REDIS_IMAGE = re.compile(r"^(docker\.io/)?(library/)?redis:")
_PLAIN_RESOURCES = ("cpu", "memory", "ephemeral-storage")
# RayCluster fields KubeRay 1.7.0 refuses while their alpha gate is off
# (ray-operator/controllers/ray/utils/validation.go, ValidateRayClusterSpec).
GATED_FIELDS = {
    "tlsOptions": "RayClusterMTLS",
    "networkPolicy": "RayClusterNetworkPolicy",
    "historyServerOptions": "RayClusterHistoryServer",
}
ROCKSDB_GATE = "GCSFaultToleranceEmbeddedStorage"  # gcsFaultToleranceOptions.backend: rocksdb
SCHEDULER_LABEL = "ray.io/scheduler-name"  # KubeRay hands such a cluster to its batch scheduler
# Downloads in a command, an entrypoint or a runtime environment: they need the internet.
_DOWNLOAD = re.compile(
    r"\b(pip|uv|conda)\s+(install|run|sync)\b|\bgit\s+clone\b|https?://(?!localhost|127\.0\.0\.1)[^\s\"']+"
)
_RUNTIME_ENV_DOWNLOADS = ("pip", "uv", "conda")


class SamplesUnknown(Exception):
    """Why the samples of the KubeRay under test cannot be read; `outcome` is the check's reason
    (starting with the not-applicable prefix when nothing is wrong, else a harness error)."""

    def __init__(self, why: str, outcome: str) -> None:
        super().__init__(why)
        self.outcome = outcome


def locate(environment: Any) -> Path:
    """The samples folder of the KubeRay under test: the checkout's, or the Go module's of the
    version the install builds or deploys (the install's own resolution, `Environment.under_test`)."""
    from conformance.checks import NOT_APPLICABLE  # noqa: PLC0415

    version = "v" + environment.options.profile.kuberay.version.removeprefix("v")
    try:
        kuberay = environment.under_test()
        version = "v" + (kuberay.version or version).removeprefix("v")
        operator_dir = kuberay.operator_dir()
    except (HarnessError, OSError) as exc:
        why = f"the samples of KubeRay {version} could not be read: {exc}"
        raise SamplesUnknown(why, why) from exc
    if operator_dir is None:
        why = (
            f"kuberay.install is {kuberay.install}: "
            "the samples of a KubeRay the run did not install are not known"
        )
        raise SamplesUnknown(why, NOT_APPLICABLE + why + " (pass --kuberay-source DIR to test a checkout)")
    return operator_dir / SAMPLES_DIR


@dataclass(frozen=True)
class SampleManifest:
    """One of KubeRay's sample manifests (ray-operator/config/samples/): its file and its objects."""

    file: str
    documents: tuple[dict[str, Any], ...]

    @property
    def kind(self) -> str:
        kinds = {doc.get("kind") for doc in self.documents}
        return next(kind for kind in RAY_KINDS if kind in kinds)

    @property
    def main(self) -> dict[str, Any]:
        """The object the check follows: the sample's RayService, else RayJob, else RayCluster."""
        return next(doc for doc in self.documents if doc.get("kind") == self.kind)


def load(path: Path) -> SampleManifest:
    documents = tuple(doc for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict))
    return SampleManifest(path.name, documents)


def listing(samples_dir: Path) -> list[str]:
    """The sample files (top level, as KubeRay's own sampleyaml test reads them) that hold a
    RayCluster, RayJob or RayService; a file that does not parse is listed, so its check fails."""
    names = []
    for path in sorted(samples_dir.glob("*.yaml")):
        try:
            kinds = {doc.get("kind") for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)}
        except yaml.YAMLError:
            kinds = {RAY_KINDS[-1]}
        if kinds & set(RAY_KINDS):
            names.append(path.name)
    return names


@dataclass(frozen=True)
class Adaptation:
    """What a sample gets from the profile: the images this cluster has and the sizes it fits."""

    ray_image: str
    ray_version: str
    redis_image: str
    pull_policy: str
    head_resources: dict[str, Any]
    worker_resources: dict[str, Any]


def adapt(sample: SampleManifest, to: Adaptation) -> SampleManifest:
    documents = copy.deepcopy(list(sample.documents))
    for doc in documents:
        for path, pod_spec in pod_specs(doc):
            head = "headGroupSpec" in path
            for container in [*pod_spec.get("containers", []), *pod_spec.get("initContainers", [])]:
                image = str(container.get("image", ""))
                if _RAY_IMAGE.match(image):
                    container["image"] = to.ray_image
                    container["imagePullPolicy"] = to.pull_policy
                    container["resources"] = _sized(
                        container.get("resources") or {}, to.head_resources if head else to.worker_resources
                    )
                elif _REDIS_IMAGE.match(image):
                    container["image"] = to.redis_image
                    container["imagePullPolicy"] = to.pull_policy
        spec = cluster_spec(doc)
        if spec is not None and "rayVersion" in spec:
            spec["rayVersion"] = to.ray_version
    return SampleManifest(sample.file, tuple(documents))


def _sized(asked: dict[str, Any], profile: dict[str, Any]) -> dict[str, Any]:
    """The profile's CPU and memory, keeping what else the sample asks (GPUs, TPUs)."""
    sized = copy.deepcopy(profile)
    for kind in ("limits", "requests"):
        extra = {k: v for k, v in (asked.get(kind) or {}).items() if not _plain(k)}
        if extra:
            sized[kind] = {**sized.get(kind, {}), **extra}
    return sized


def _plain(resource: str) -> bool:
    return resource in _PLAIN_RESOURCES or resource.startswith("hugepages-")


def in_namespace(sample: SampleManifest, namespace: str) -> SampleManifest:
    """Samples bind roles to service accounts of the namespace `default`; here, of the check's."""
    documents = copy.deepcopy(list(sample.documents))
    for doc in documents:
        for subject in doc.get("subjects") or []:
            if subject.get("kind") == "ServiceAccount" and subject.get("namespace") == "default":
                subject["namespace"] = namespace
    return SampleManifest(sample.file, tuple(documents))


def cluster_spec(doc: dict[str, Any]) -> dict[str, Any] | None:
    found: Any = doc
    for key in CLUSTER_SPEC_PATH.get(str(doc.get("kind")), ("no such key",)):
        found = found.get(key) if isinstance(found, dict) else None
    return found if isinstance(found, dict) else None


def pod_specs(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    """Every pod spec inside an object (a dict with a `containers` list), with the keys leading to it."""
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list):
            yield path, node
        for key, value in node.items():
            yield from pod_specs(value, (*path, str(key)))
    elif isinstance(node, list):
        for value in node:
            yield from pod_specs(value, path)


@dataclass(frozen=True)
class Offer:
    """What the cluster and its operator offer a sample."""

    served: dict[tuple[str, str], bool]  # (apiVersion, kind) of the APIs served -> namespaced
    node_images: frozenset[str]  # every name and tag the nodes report, normalized
    node_labels: tuple[dict[str, str], ...]
    extended_resources: dict[str, int]  # the most any one node has allocatable, per resource
    csi_drivers: frozenset[str]
    feature_gates: dict[str, bool]
    batch_scheduler: str  # the operator's --batch-scheduler, "" without one
    pulls_images: bool
    reaches_internet: bool
    simulated_gpus: bool = False
    gpu_resource: str = "nvidia.com/gpu"
    notes: list[str] = field(default_factory=list)


def normalized_image(image: str) -> str:
    """`redis:7` and `docker.io/library/redis:7` are one image; a name without a tag is `:latest`."""
    name = image.split("@", 1)[0]
    if ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    return name


def needs(sample: SampleManifest, offer: Offer) -> list[str]:
    """What the (adapted) sample needs that the cluster lacks; empty when it can run here."""
    made = {(doc.get("kind"), (doc.get("metadata") or {}).get("name")) for doc in sample.documents}
    reasons: list[str] = []
    for doc in sample.documents:
        reasons += _api(doc, offer)
        reasons += _gates(doc, offer)
        reasons += _scheduler(doc, offer)
        reasons += _selected_cluster(doc, sample.documents)
        for _path, pod_spec in pod_specs(doc):
            reasons += _pod_needs(pod_spec, offer, made)
        if not offer.reaches_internet:
            reasons += _downloads(doc)
    return list(dict.fromkeys(reasons))  # each reason once, in order


def _api(doc: dict[str, Any], offer: Offer) -> list[str]:
    key = (str(doc.get("apiVersion")), str(doc.get("kind")))
    if key not in offer.served:
        return [f"the API {key[1]} ({key[0]}), which the cluster does not serve"]
    if not offer.served[key]:
        name = (doc.get("metadata") or {}).get("name")
        return [f"the cluster-scoped {key[1]} {name}, which a run does not make (it changes only namespaces)"]
    return []


def _gates(doc: dict[str, Any], offer: Offer) -> list[str]:
    spec = cluster_spec(doc) or {}
    wanted = [(f, gate) for f, gate in GATED_FIELDS.items() if spec.get(f) is not None]
    if str((spec.get("gcsFaultToleranceOptions") or {}).get("backend", "")).lower() == "rocksdb":
        wanted.append(("gcsFaultToleranceOptions.backend: rocksdb", ROCKSDB_GATE))
    return [
        f"the {gate} feature gate for {name}, which the operator runs "
        + ("without" if gate in offer.feature_gates else "without (this version has no such gate)")
        for name, gate in wanted
        if not offer.feature_gates.get(gate)
    ]


def _scheduler(doc: dict[str, Any], offer: Offer) -> list[str]:
    labels = (doc.get("metadata") or {}).get("labels") or {}
    wanted = labels.get(SCHEDULER_LABEL)
    if not wanted or wanted == offer.batch_scheduler:
        return []
    return [f"the batch scheduler {wanted} (the operator runs with {offer.batch_scheduler or 'none'})"]


def _selected_cluster(doc: dict[str, Any], documents: tuple[dict[str, Any], ...]) -> list[str]:
    """A RayJob's clusterSelector names a RayCluster the sample must make (else the user has one)."""
    selector = ((doc.get("spec") or {}).get("clusterSelector") or {}) if doc.get("kind") == "RayJob" else {}
    if not selector:
        return []
    for cluster in (d for d in documents if d.get("kind") == "RayCluster"):
        meta = cluster.get("metadata") or {}
        labels = {**(meta.get("labels") or {}), "ray.io/cluster": meta.get("name")}
        if all(labels.get(key) == value for key, value in selector.items()):
            return []
    wanted = ",".join(f"{key}={value}" for key, value in selector.items())
    return [f"a RayCluster selected by {wanted} that the sample expects to exist"]


def _pod_needs(pod_spec: dict[str, Any], offer: Offer, made: set[tuple[Any, Any]]) -> list[str]:
    reasons = []
    scheduler = pod_spec.get("schedulerName")
    if scheduler and scheduler != "default-scheduler":
        reasons.append(f"the scheduler {scheduler}")
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if not any(labels.get(key) == str(value) for labels in offer.node_labels):
            reasons.append(f"a node labelled {key}={value}")
    for container in [*pod_spec.get("containers", []), *pod_spec.get("initContainers", [])]:
        reasons += _container_needs(container, offer, made)
    for volume in pod_spec.get("volumes") or []:
        reasons += _volume_needs(volume, offer, made)
    return reasons


def _container_needs(container: dict[str, Any], offer: Offer, made: set[tuple[Any, Any]]) -> list[str]:
    reasons = []
    image = str(container.get("image", ""))
    if not offer.pulls_images and normalized_image(image) not in offer.node_images:
        reasons.append(f"the image {image}, which no node holds (the cluster cannot pull)")
    resources = container.get("resources") or {}
    for kind in ("limits", "requests"):
        for name, amount in (resources.get(kind) or {}).items():
            if _plain(name):
                continue
            if offer.extended_resources.get(name, 0) < _count(amount):
                reasons.append(f"{amount} {name} in one pod, which no node has")
    for source in container.get("env") or []:
        ref = (source.get("valueFrom") or {}).get("secretKeyRef") or {}
        reasons += _expected("Secret", ref.get("name"), made, optional=bool(ref.get("optional")))
    for source in container.get("envFrom") or []:
        for kind, key in (("Secret", "secretRef"), ("ConfigMap", "configMapRef")):
            ref = source.get(key) or {}
            reasons += _expected(kind, ref.get("name"), made, optional=bool(ref.get("optional")))
    return reasons


def _volume_needs(volume: dict[str, Any], offer: Offer, made: set[tuple[Any, Any]]) -> list[str]:
    reasons = []
    secret = volume.get("secret") or {}
    reasons += _expected("Secret", secret.get("secretName"), made, optional=bool(secret.get("optional")))
    config_map = volume.get("configMap") or {}
    reasons += _expected("ConfigMap", config_map.get("name"), made, optional=bool(config_map.get("optional")))
    driver = (volume.get("csi") or {}).get("driver")
    if driver and driver not in offer.csi_drivers:
        reasons.append(f"the CSI driver {driver}")
    claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
    reasons += _expected("PersistentVolumeClaim", claim, made, optional=False)
    return reasons


def _expected(kind: str, name: Any, made: set[tuple[Any, Any]], optional: bool) -> list[str]:
    if not name or optional or (kind, name) in made:
        return []
    return [f"a {kind} {name} that the sample expects to exist"]


def _downloads(doc: dict[str, Any]) -> list[str]:
    """What the object downloads while it runs (the reason reads "needs the internet: ...")."""
    found = []
    spec = doc.get("spec") or {}
    for text in (spec.get("runtimeEnvYAML"), spec.get("serveConfigV2")):
        found += _runtime_env_downloads(text)
    found += (
        [f"entrypoint `{spec['entrypoint']}`"] if _DOWNLOAD.search(str(spec.get("entrypoint", ""))) else []
    )
    for _path, pod_spec in pod_specs(doc):
        for container in pod_spec.get("containers", []) + pod_spec.get("initContainers", []):
            hooks = [
                ((container.get("lifecycle") or {}).get(h) or {}).get("exec") or {}
                for h in ("postStart", "preStop")
            ]
            parts = [*container.get("command", []), *container.get("args", [])]
            command = " ".join(
                str(part) for part in [*parts, *(p for hook in hooks for p in hook.get("command", []))]
            )
            match = _DOWNLOAD.search(command)
            if match:
                found.append(f"`{match.group(0)}` in container {container.get('name')}")
    return (
        [f"the internet ({', '.join(dict.fromkeys(found))}), which the cluster's pods cannot reach"]
        if found
        else []
    )


def _runtime_env_downloads(text: Any) -> list[str]:
    if not text:
        return []
    try:
        parsed = yaml.safe_load(str(text))
    except yaml.YAMLError:
        return []
    envs = (
        [parsed]
        if not isinstance(parsed, dict) or "applications" not in parsed
        else [app.get("runtime_env") or {} for app in parsed.get("applications") or []]
    )
    found = []
    for env in envs:
        if not isinstance(env, dict):
            continue
        found += [f"runtime_env {key}" for key in _RUNTIME_ENV_DOWNLOADS if env.get(key)]
        found += [
            f"runtime_env {key} {value}"
            for key in ("working_dir", "py_modules")
            for value in ([env.get(key)] if isinstance(env.get(key), str) else env.get(key) or [])
            if "://" in str(value)
        ]
    return found


def _count(amount: Any) -> int:
    text = str(amount)
    try:
        return int(text)
    except ValueError:
        return 1  # a quantity like "500m" of an extended resource: needs at least one

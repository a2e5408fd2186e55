"""Install KubeRay the ways its users do, and say what that install's own files promise.

- `install_chart`: the one Helm install, for both chart sources: a checkout's
  `helm-chart/kuberay-operator` folder (`--kuberay-source`) or the KubeRay Helm repository at a
  version (`kuberay.install: helm`, kind and EKS). As KubeRay's upgrade guide says, the chart's
  CRDs are applied server-side first (Helm installs crds/ once and never upgrades them), then
  `helm upgrade --install`. A chart that does not render is refused by `helm template` before
  anything is changed.
- `install_kustomize`: a checkout without a chart, from `ray-operator/config/default`, as
  KubeRay's `make deploy` does (`kustomize edit set image`, then build and apply server-side),
  on a copy of config/ so the checkout is never written to.
- `clear_other_installs`: one operator Deployment per namespace. Before an install of one kind,
  the objects of another (a Helm release, the hand-made imitation, a kustomize deploy) are
  removed; CRDs and Ray objects stay.
- `Promised`: the feature gates, leader election and CRDs the install's own files state
  (values.yaml, crds/, config/manager, features.go), for the operator checks to compare with
  what runs.

Every helm call gets the kubeconfig and context the Python client uses.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from conformance.errors import ProvisioningError, UsageError
from conformance.install import kuberay, operator_args, operator_facts, operator_spec
from conformance.install.cli_tools import tool_binary
from conformance.install.kuberay_source import Checkout
from conformance.kube import apply
from conformance.kube.target import KubeTarget
from conformance.progress import progress

RELEASE = operator_spec.NAME  # the release name KubeRay's docs use; the chart names its objects after it
HELM = "helm"
KUSTOMIZE = "kustomize"
LOCAL_BUILD = "local-build"
INSTALL_LABEL = "kuberay-conformance.io/install"  # on objects of a kustomize deploy
IMAGE_BUILD_ANNOTATION = "kuberay-conformance.io/image-build"  # a rebuilt image rolls the pod
KUSTOMIZE_IMAGE = "kuberay/operator"  # the image name config/manager/manager.yaml uses
# On the local provider's 2-core node the chart's 100m CPU limit makes the operator's start-up
# slow, which would be measured as KubeRay's slowness: the same resources as the hand-made
# install (manifests/kuberay/operator.yaml) for an image built here.
LOCAL_RESOURCES = {
    "requests": {"cpu": "100m", "memory": "256Mi"},
    "limits": {"cpu": "500m", "memory": "512Mi"},
}


# --- the helm and kustomize programs ---------------------------------------------------------


@dataclass(frozen=True)
class ChartSource:
    """A chart folder, or the chart `kuberay-operator` of a Helm repository at a version."""

    directory: Path | None = None
    repo: str = ""
    version: str = ""

    @classmethod
    def repository(cls, version: str, repo: str = operator_spec.HELM_REPO) -> ChartSource:
        return cls(repo=repo, version=version.removeprefix("v"))

    def args(self) -> list[str]:
        if self.directory is not None:
            return [str(self.directory)]
        return ["kuberay-operator", "--repo", self.repo, "--version", self.version]

    def describe(self) -> str:
        return str(self.directory) if self.directory else f"kuberay-operator {self.version} from {self.repo}"


def _run(
    argv: Sequence[str],
    what: str,
    fix: str,
    error: type[Exception] = ProvisioningError,
    cwd: Path | None = None,
) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, check=False, cwd=cwd)
    except FileNotFoundError as exc:
        raise ProvisioningError(f"{argv[0]} cannot be run", "see `tool_binary`") from exc
    if done.returncode != 0:
        raise error(f"{what} failed: {_said(done.stderr or done.stdout)}", fix)  # type: ignore[call-arg]
    return done.stdout


def _said(output: str) -> str:
    """The line that says what went wrong: helm and kustomize print it as `Error: ...`, then hints."""
    lines = [line.strip() for line in output.splitlines() if line.strip()] or ["no output"]
    errors = [line.removeprefix("Error: ") for line in lines if line.startswith("Error:")]
    return (errors or lines)[-1]


# --- values (pure) ---------------------------------------------------------------------------


def merged_gate_list(chart_list: Sequence[dict[str, Any]], gates: dict[str, bool]) -> list[dict[str, Any]]:
    """The chart's featureGates list with `gates` applied: Helm replaces a list value whole, so the
    chart's entries are kept in order with their values changed, and new gates are appended."""
    merged = [
        {**entry, "enabled": gates.get(entry["name"], entry.get("enabled", False))} for entry in chart_list
    ]
    listed = {entry["name"] for entry in chart_list}
    merged += [{"name": name, "enabled": on} for name, on in gates.items() if name not in listed]
    return merged


def chart_gates(values: dict[str, Any]) -> dict[str, bool]:
    """The gates a chart's values name, in their order."""
    return {entry["name"]: bool(entry.get("enabled", False)) for entry in values.get("featureGates") or []}


def chart_values(
    spec: operator_spec.OperatorSpec, defaults: dict[str, Any], image: str = "", image_build: str = ""
) -> dict[str, Any]:
    """Values for the chart: the profile's gates (over the chart's list), leader election, watched
    namespaces and, for a local image, the image itself with a pull policy that never pulls."""
    values: dict[str, Any] = {
        "featureGates": merged_gate_list(defaults.get("featureGates") or [], spec.feature_gates),
        "leaderElectionEnabled": spec.leader_election,
    }
    if spec.watch_namespaces:
        values["watchNamespace"] = list(spec.watch_namespaces)
    if image:
        repository, _, tag = image.rpartition(":")
        values["image"] = {"repository": repository, "tag": tag, "pullPolicy": "Never"}
        values["resources"] = LOCAL_RESOURCES
    else:
        values["image"] = {"tag": spec.version}
    if image_build:
        values["annotations"] = {**(defaults.get("annotations") or {}), IMAGE_BUILD_ANNOTATION: image_build}
    if spec.env:
        values["env"] = [{"name": name, "value": value} for name, value in spec.env.items()]
    if spec.extra_args:
        raise UsageError(
            "kuberay.extra_args cannot be passed through the kuberay-operator Helm chart",
            "use kuberay.env, or kuberay.install: local-build",
        )
    return values


# --- what the chart says ---------------------------------------------------------------------


def show(helm: str, source: ChartSource, what: str) -> str:
    """`helm show values|crds` of the chart."""
    return _run(
        [helm, "show", what, *source.args()],
        f"helm show {what} {source.describe()}",
        "check the chart folder, or that the Helm repository is reachable",
    )


def chart_default_values(helm: str, source: ChartSource) -> dict[str, Any]:
    if source.directory is not None:  # the same text `helm show values` prints, without a process
        return yaml.safe_load((source.directory / "values.yaml").read_text()) or {}
    return yaml.safe_load(show(helm, source, "values")) or {}


def chart_crds(helm: str, source: ChartSource) -> list[dict[str, Any]]:
    docs = [doc for doc in yaml.safe_load_all(show(helm, source, "crds")) if doc]
    return [doc for doc in docs if doc.get("kind") == "CustomResourceDefinition"]


@contextmanager
def _values_file(values: dict[str, Any]) -> Iterator[str]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="kuberay-values-") as handle:
        json.dump(values, handle)
        handle.flush()
        yield handle.name


def render(helm: str, source: ChartSource, namespace: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    """`helm template` with our values: a chart that does not render is refused here (exit 3),
    before anything is installed."""
    with _values_file(values) as path:
        out = _run(
            [helm, "template", RELEASE, *source.args(), "--namespace", namespace, "--values", path],
            f"helm template of {source.describe()}",
            "fix the chart (run `helm lint` on it) or the profile's kuberay settings",
            error=UsageError,
        )
    return [doc for doc in yaml.safe_load_all(out) if doc]


def rendered_deployment(docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    found = [doc for doc in docs if doc.get("kind") == "Deployment"]
    if len(found) != 1:
        raise UsageError(
            f"the KubeRay chart rendered {len(found)} Deployments, not one",
            "check the chart's templates/deployment.yaml",
        )
    return found[0]


def install_chart(
    target: KubeTarget,
    api: client.ApiClient,
    spec: operator_spec.OperatorSpec,
    source: ChartSource,
    timeout: float,
    image: str = "",
    image_build: str = "",
) -> list[dict[str, Any]]:
    """CRDs server-side, then `helm upgrade --install` of `source`; returns the chart's CRDs."""
    helm = tool_binary(HELM)
    values = chart_values(spec, chart_default_values(helm, source), image, image_build)
    render(helm, source, spec.namespace, values)
    clear_other_installs(target, api, spec.namespace, keep=HELM, timeout=timeout)
    apply.ensure_namespace(client.CoreV1Api(api), spec.namespace)
    crds = chart_crds(helm, source)
    apply.apply_crds(api, crds, what=f"chart {source.describe()}")
    with _values_file(values) as path, progress(f"helm upgrade --install {RELEASE} from {source.describe()}"):
        _run(
            [
                helm, "upgrade", "--install", RELEASE, *source.args(),
                "--namespace", spec.namespace, "--skip-crds", "--values", path,
                "--wait", "--timeout", f"{int(timeout)}s", *target.helm_args(),
            ],
            f"helm upgrade --install {RELEASE} ({source.describe()})",
            f"see `helm status {RELEASE} -n {spec.namespace}` and the pods in {spec.namespace}",
        )  # fmt: skip
    return crds


# --- kustomize -------------------------------------------------------------------------------


def kustomize_render(checkout: Checkout, namespace: str, image: str) -> list[dict[str, Any]]:
    """`kustomize build config/default` after `kustomize edit set image|namespace`, on a copy."""
    kustomize = tool_binary(KUSTOMIZE)
    with tempfile.TemporaryDirectory(prefix="kuberay-config-") as work:
        config = Path(work) / "config"
        shutil.copytree(checkout.operator_dir / "config", config, symlinks=False)
        for path in [config, *config.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)  # a module cache copy is read-only
        default = config / "default"
        fix = f"fix {checkout.operator_dir / 'config'} so `kustomize build config/default` succeeds"
        for edit in (["set", "image", f"{KUSTOMIZE_IMAGE}={image}"], ["set", "namespace", namespace]):
            # `kustomize edit` changes the kustomization.yaml of its working directory.
            _run([kustomize, "edit", *edit], f"kustomize edit {' '.join(edit)}", fix, UsageError, cwd=default)
        out = _run(
            [kustomize, "build", str(default)], "kustomize build config/default", fix, error=UsageError
        )
    return [doc for doc in yaml.safe_load_all(out) if doc]


def deploy_docs(
    docs: Sequence[dict[str, Any]], gates: dict[str, bool], image_build: str
) -> list[dict[str, Any]]:
    """The kustomize output as applied: our install label on every object, the profile's gates
    merged into the operator's --feature-gates, and a pull policy that never pulls (pure)."""
    out = []
    for original in docs:
        doc = json.loads(json.dumps(original))
        doc.setdefault("metadata", {}).setdefault("labels", {})[INSTALL_LABEL] = KUSTOMIZE
        if doc.get("kind") == "Deployment":
            pod = doc["spec"]["template"]
            if image_build:
                pod.setdefault("metadata", {}).setdefault("annotations", {})[IMAGE_BUILD_ANNOTATION] = (
                    image_build
                )
            for container in pod["spec"]["containers"]:
                if container.get("name") == operator_spec.NAME:
                    container["imagePullPolicy"] = "Never"
                    container["resources"] = LOCAL_RESOURCES
                    container["args"] = with_gates(container.get("args") or [], gates)
        out.append(doc)
    return out


def with_gates(args: Sequence[str], gates: dict[str, bool]) -> list[str]:
    """`args` with `gates` overlaid on its --feature-gates (added when it has none) (pure)."""
    current = operator_args.parse_operator_args(list(args)).feature_gates
    merged = {**current, **gates}
    kept = [arg for arg in args if not arg.lstrip("-").startswith("feature-gates")]
    return [*kept, operator_spec.feature_gates_arg(merged)] if merged else kept


def install_kustomize(
    target: KubeTarget,
    api: client.ApiClient,
    spec: operator_spec.OperatorSpec,
    checkout: Checkout,
    image: str,
    image_build: str,
    timeout: float,
) -> list[dict[str, Any]]:
    """Deploy config/default of the checkout (server-side, CRDs first); returns its CRDs."""
    docs = deploy_docs(kustomize_render(checkout, spec.namespace, image), spec.feature_gates, image_build)
    clear_other_installs(target, api, spec.namespace, keep=KUSTOMIZE, timeout=timeout)
    crds = [doc for doc in docs if doc["kind"] == "CustomResourceDefinition"]
    apply.ensure_namespace(client.CoreV1Api(api), spec.namespace)
    apply.apply_crds(api, crds, what="ray-operator/config/crd")
    dynamic = DynamicClient(api)
    with progress(f"applying ray-operator/config/default to {spec.namespace}") as line:
        for doc in docs:
            if doc["kind"] in ("CustomResourceDefinition", "Namespace"):
                continue
            line.update(f"{doc['kind']}/{doc['metadata']['name']}")
            apply.apply_object(dynamic, doc)
    return crds


def kustomize_manifest_args(checkout: Checkout) -> list[str]:
    """The operator's args in config/manager/manager.yaml (what `make deploy` passes)."""
    manager = checkout.operator_dir / "config" / "manager" / "manager.yaml"
    for doc in yaml.safe_load_all(manager.read_text()):
        if doc and doc.get("kind") == "Deployment":
            for container in doc["spec"]["template"]["spec"]["containers"]:
                if container.get("name") == operator_spec.NAME:
                    return list(container.get("args") or [])
    return []


# --- one install per namespace ---------------------------------------------------------------


def installed_mode(api: client.ApiClient, namespace: str) -> str:
    """How the operator Deployment in `namespace` was installed: helm, kustomize, local-build, or ""."""
    try:
        dep = client.AppsV1Api(api).read_namespaced_deployment(operator_spec.NAME, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return ""
        raise
    labels = dep.metadata.labels or {}
    annotations = dep.metadata.annotations or {}
    if labels.get(INSTALL_LABEL) == KUSTOMIZE:
        return KUSTOMIZE
    if labels.get("app.kubernetes.io/managed-by") == "Helm" and annotations.get("meta.helm.sh/release-name"):
        return HELM
    return LOCAL_BUILD  # the hand-made objects (also after they were applied over a Helm install)


def helm_release_secrets(api: client.ApiClient, namespace: str) -> list[str]:
    """Helm's record of the release (its default storage: Secrets labelled owner=helm)."""
    secrets = client.CoreV1Api(api).list_namespaced_secret(
        namespace, label_selector=f"owner=helm,name={RELEASE}"
    )
    return [s.metadata.name for s in secrets.items]


def clear_other_installs(
    target: KubeTarget, api: client.ApiClient, namespace: str, keep: str, timeout: float
) -> None:
    """Remove an operator installed in `namespace` another way than `keep` (CRDs and Ray objects stay).

    A Helm release is uninstalled with helm unless it is what `keep` upgrades; the hand-made or
    kustomize objects (the same names, other selectors) are deleted, so Helm can own its objects
    and a Deployment's immutable selector never blocks the next install.
    """
    mode = installed_mode(api, namespace)
    release = bool(helm_release_secrets(api, namespace))
    if release and (keep != HELM or mode not in ("", HELM)):
        with progress(f"helm uninstall {RELEASE} in {namespace} (installing with {keep})"):
            _run(
                [tool_binary(HELM), "uninstall", RELEASE, "--namespace", namespace, "--wait",
                 "--timeout", f"{int(timeout)}s", *target.helm_args()],
                f"helm uninstall {RELEASE}",
                f"remove it by hand: helm uninstall {RELEASE} -n {namespace}",
            )  # fmt: skip
        mode = installed_mode(api, namespace)
    if mode and mode not in (keep, HELM):
        with progress(f"removing the {mode} operator objects from {namespace} (installing with {keep})"):
            kuberay.remove_operator_objects(api, namespace, timeout)


# --- what the install's own files promise ----------------------------------------------------


@dataclass(frozen=True)
class Promised:
    """The operator facts the install's source states, to compare with what runs."""

    origin: str  # the files (or tables) these come from, for the checks' messages
    binary_gates: dict[str, bool] = field(hash=False)  # the binary's defaults (features.go)
    feature_gates: dict[str, bool] = field(hash=False)  # what the operator must run with
    leader_election: bool = True
    crds: tuple[dict[str, Any], ...] = field(default=(), hash=False)
    crds_origin: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "feature_gates": self.feature_gates,
            "leader_election": self.leader_election,
            "crds_origin": self.crds_origin,
        }


def promised_by_chart(
    values: dict[str, Any], overrides: dict[str, bool], binary_gates: dict[str, bool]
) -> tuple[dict[str, bool], bool]:
    """(gates, leader election) the chart's values.yaml plus the profile's overrides promise (pure)."""
    gates = {**binary_gates, **chart_gates(values), **overrides}
    return gates, bool(values.get("leaderElectionEnabled", True))


def promised_by_manifest(
    args: Sequence[str], overrides: dict[str, bool], binary_gates: dict[str, bool]
) -> tuple[dict[str, bool], bool]:
    """(gates, leader election) config/manager's args plus the profile's overrides promise (pure)."""
    parsed = operator_args.parse_operator_args(list(args))
    return {**binary_gates, **parsed.feature_gates, **overrides}, parsed.leader_election


def running_gates(facts: operator_facts.OperatorFacts, binary_gates: dict[str, bool]) -> dict[str, bool]:
    """What the operator runs with: the binary's defaults overlaid by its --feature-gates."""
    return {**binary_gates, **facts.feature_gates}


def gate_mismatches(running: dict[str, bool], promised: dict[str, bool]) -> dict[str, dict[str, Any]]:
    """gate -> {running, promised} where they differ, over the gates of both (pure)."""
    return {
        gate: {"running": running.get(gate), "promised": promised.get(gate)}
        for gate in sorted(set(running) | set(promised))
        if running.get(gate) != promised.get(gate)
    }


def promised_by_tables(spec: operator_spec.OperatorSpec, overrides: dict[str, bool]) -> Promised:
    """The hand-made imitation of the chart (a module build, no chart): the harness's own tables of
    the chart's defaults, and the CRDs of the module the binary was built from."""
    binary = operator_spec.BINARY_FEATURE_GATES.get(spec.version, {})
    gates = {**binary, **operator_spec.chart_feature_gates(spec.version), **overrides}
    bases = kuberay.module_dir(spec.version) / "config" / "crd" / "bases"
    return Promised(
        origin=f"the harness's table of the {spec.version} chart defaults (no chart was installed)",
        binary_gates=binary,
        feature_gates=gates,
        leader_election=True,
        crds=tuple(kuberay.crd_documents(bases)),
        crds_origin=f"config/crd/bases of the {spec.version} Go module",
    )


def promised_by_repository(source: ChartSource, overrides: dict[str, bool], version: str) -> Promised:
    """A chart from the Helm repository: its values and CRDs as `helm show` prints them."""
    helm = tool_binary(HELM)
    binary = operator_spec.BINARY_FEATURE_GATES.get(version, {})
    gates, leader = promised_by_chart(chart_default_values(helm, source), overrides, binary)
    return Promised(
        origin=f"values.yaml of chart {source.describe()}, with the profile's overrides",
        binary_gates=binary,
        feature_gates=gates,
        leader_election=leader,
        crds=tuple(chart_crds(helm, source)),
        crds_origin=f"crds/ of chart {source.describe()}",
    )

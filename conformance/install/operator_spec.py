"""The KubeRay operator to install, as its Helm chart installs it by default: the names of its
objects, the chart's and the binary's feature-gate defaults, `OperatorSpec` and the container
arguments the chart renders for it (`chart_args`). Pure: no cluster, no files.

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
  operator's namespace unless `--leader-election-namespace`; `--watch-namespace` is a comma list
  (read back by `operator_args`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from conformance.build import pins
from conformance.errors import UsageError

DEFAULT_VERSION = pins.KUBERAY
OPERATOR_MODULE = "github.com/ray-project/kuberay/ray-operator"
HELM_REPO = "https://ray-project.github.io/kuberay-helm/"
NAME = "kuberay-operator"  # Deployment, ServiceAccount, Service, ClusterRole(Binding): the chart's names
LEADER_ELECTION_ROLE = "kuberay-operator-leader-election"
LEASE_NAME = "ray-operator-leader"  # LeaderElectionID in main.go
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
_VERSION = re.compile(r"v\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def chart_feature_gates(version: str) -> dict[str, bool]:
    """The gates the chart of `version` passes by default, in the chart's order."""
    if version not in CHART_FEATURE_GATES:
        raise UsageError(
            f"no recorded Helm chart defaults for KubeRay {version}",
            "pass feature_gates explicitly, or add the version to CHART_FEATURE_GATES in "
            "conformance/install/operator_spec.py from its helm-chart/kuberay-operator/values.yaml",
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

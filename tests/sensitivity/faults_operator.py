"""Seeded faults of area operator."""

from __future__ import annotations

from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from conformance.install import operator_args, operator_spec
from conformance.kube.rollout import wait_rolled_out

from .behind_the_back import RAY_GROUP, drop_rbac, set_last_schedule_time
from .faults import Fault
from .faults_rayservice import stale_spec_hash_on_changes_that_keep_the_cluster
from .rogue import Rogue, before_checks

OPERATOR = "test_operator.py::"
LEADER_ELECTION_ROLE = "kuberay-operator-leader-election"
OPERATOR_CLUSTER_ROLE = "kuberay-operator"
OPERATOR_SELECTOR = "app.kubernetes.io/name=kuberay-operator"
FLIPPED_GATE = "RayMultiHostIndexing"  # on by default in 1.6 and 1.7, left alone by the default profile


@before_checks
def lease_update_forbidden(rogue: Rogue) -> None:
    """The operator's Role and ClusterRole edited to lose `update` on leases (both grant it): the
    running leader cannot renew, and a replacement pod can never take over the lease, so nothing is
    reconciled."""
    drop_rbac(rogue, "Role", LEADER_ELECTION_ROLE, "leases", verb="update")
    drop_rbac(rogue, "ClusterRole", OPERATOR_CLUSTER_ROLE, "leases", verb="update")


def recreate_head_on_ray_version_change(rogue: Rogue) -> None:
    """An operator that recreates a RayCluster's head when only its rayVersion changes (KubeRay
    leaves pods and images alone). The head goes at once (no grace): the check's window is 30 s."""
    first_seen: dict[str, str] = {}
    for cluster in rogue.ray_objects("rayclusters"):
        meta, version = cluster["metadata"], cluster["spec"].get("rayVersion", "")
        if first_seen.setdefault(meta["uid"], version) == version:
            continue
        first_seen[meta["uid"]] = version  # once per change
        selector = f"ray.io/cluster={meta['name']},ray.io/node-type=head"
        for pod in rogue.core.list_namespaced_pod(meta["namespace"], label_selector=selector).items:
            try:
                rogue.core.delete_namespaced_pod(pod.metadata.name, meta["namespace"], grace_period_seconds=0)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                continue
            rogue.acted(f"deleted head {pod.metadata.name} after rayVersion became {version}")


def schedule_raycronjobs_whatever_the_gate(rogue: Rogue) -> None:
    """An operator whose RayCronJob controller runs with its gate off: each RayCronJob of the run is
    marked scheduled (status.lastScheduleTime, the current minute) as the controller would mark it.
    Its RayJob is not made: the status alone is what the check sees first."""
    for cron in rogue.ray_objects("raycronjobs"):
        meta = cron["metadata"]
        if cron.get("status", {}).get("lastScheduleTime"):
            continue
        tick = datetime.now(UTC).replace(second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
        if set_last_schedule_time(rogue, meta, tick):
            rogue.acted(f"marked RayCronJob {meta['namespace']}/{meta['name']} scheduled at {tick}")


@before_checks
def crds_unserved_or_missing(rogue: Rogue) -> None:
    """Ray CRDs as a hand-edited or half-removed installation leaves them: RayCluster no longer
    serves the deprecated v1alpha1 that existing manifests name, and the RayCronJob CRD is gone."""
    ext = client.ApiextensionsV1Api(rogue.api)
    crd = ext.read_custom_resource_definition(f"rayclusters.{RAY_GROUP}")
    index = next(i for i, v in enumerate(crd.spec.versions) if v.name == "v1alpha1")
    patch = [{"op": "replace", "path": f"/spec/versions/{index}/served", "value": False}]
    ext.patch_custom_resource_definition(
        crd.metadata.name, patch, _content_type="application/json-patch+json"
    )
    rogue.acted(f"set v1alpha1 of CRD {crd.metadata.name} to served: false")
    ext.delete_custom_resource_definition(f"raycronjobs.{RAY_GROUP}")
    rogue.acted(f"deleted CRD raycronjobs.{RAY_GROUP}")


@before_checks
def operator_deployment_edited(rogue: Rogue) -> None:
    """The operator Deployment edited by hand after the install: a gate turned off that the chart
    leaves on, and leader election off (two operator pods would then both reconcile)."""
    apps = rogue.apps()
    namespace = rogue.operator_namespace
    (deployment,) = apps.list_namespaced_deployment(namespace, label_selector=OPERATOR_SELECTOR).items
    container = deployment.spec.template.spec.containers[0]
    gates: dict[str, bool] = {}
    args = []
    for arg in container.args or []:
        if arg.startswith("--feature-gates="):
            gates.update(operator_args.parse_feature_gates(arg.partition("=")[2]))
        elif not arg.startswith("--enable-leader-election"):
            args.append(arg)
    args += [
        operator_spec.feature_gates_arg({**gates, FLIPPED_GATE: False}),
        "--enable-leader-election=false",
    ]
    patch = {"spec": {"template": {"spec": {"containers": [{"name": container.name, "args": args}]}}}}
    apps.patch_namespaced_deployment(deployment.metadata.name, namespace, patch)
    rogue.acted(f"set {FLIPPED_GATE}=false and --enable-leader-election=false on {deployment.metadata.name}")


@before_checks
def operator_without_metrics_flag(rogue: Rogue) -> None:
    """The chart's `--enable-metrics=true` lost on the way to the operator (a template that drops
    it, a hand edit): the binary's default is off, so the operator serves only controller-runtime's
    own metrics, none of KubeRay's. The checks start once the edited pod alone runs."""
    apps = rogue.apps()
    namespace = rogue.operator_namespace
    (deployment,) = apps.list_namespaced_deployment(namespace, label_selector=OPERATOR_SELECTOR).items
    container = deployment.spec.template.spec.containers[0]
    args = [arg for arg in container.args or [] if not arg.startswith("--enable-metrics")]
    patch = {"spec": {"template": {"spec": {"containers": [{"name": container.name, "args": args}]}}}}
    apps.patch_namespaced_deployment(deployment.metadata.name, namespace, patch)
    wait_rolled_out(rogue.api, namespace, deployment.metadata.name, timeout=300)
    rogue.acted(f"dropped --enable-metrics from {deployment.metadata.name}: {args}")


FAULTS = [
    Fault(
        name="operator-serves-no-kuberay-metrics",
        area="operator",
        misbehaviour="the operator runs without the --enable-metrics=true its chart passes, so it serves "
        "none of KubeRay's control-plane metrics",
        rogue=operator_without_metrics_flag,
        catches=(OPERATOR + "test_operator_serves_its_control_plane_metrics_for_a_raycluster",),
        bystanders=(OPERATOR + "test_feature_gates_match_the_chart_defaults",),
        evidence="KubeRay metrics served: none",
    ),
    Fault(
        name="crds-unserved-or-missing",
        area="operator",
        misbehaviour="RayCluster stops serving v1alpha1 and the RayCronJob CRD is missing, so the served "
        "CRDs are not the install's",
        rogue=crds_unserved_or_missing,
        catches=(
            OPERATOR + "test_crds_are_served_at_v1_and_v1alpha1_is_kept",
            OPERATOR + "test_raycronjob_crd_is_served_at_v1",
            OPERATOR + "test_served_crds_match_the_operator_version",
        ),
        bystanders=(OPERATOR + "test_feature_gates_match_the_chart_defaults",),
        evidence=("no longer serves v1alpha1", "raycronjobs.ray.io", "are not those of"),
    ),
    Fault(
        name="operator-deployment-edited",
        area="operator",
        misbehaviour="the operator runs with a gate the chart leaves on turned off, and without leader "
        "election",
        rogue=operator_deployment_edited,
        catches=(
            OPERATOR + "test_feature_gates_match_the_chart_defaults",
            OPERATOR + "test_leader_election_is_on_and_the_lease_is_held",
        ),
        bystanders=(OPERATOR + "test_crds_are_served_at_v1_and_v1alpha1_is_kept",),
        evidence=(FLIPPED_GATE, "leader election off"),
    ),
    Fault(
        name="lease-update-forbidden",
        area="operator",
        misbehaviour="after its pod is replaced, no operator takes the leader lease",
        rogue=lease_update_forbidden,
        catches=(OPERATOR + "test_operator_is_ready_and_recovers_after_its_pod_is_deleted",),
        run_args=("--timeout", "ready=90"),  # the replacement is Ready within about 14 s here
        evidence="leader lease",
    ),
    Fault(
        name="head-recreated-on-ray-version-change",
        area="operator",
        misbehaviour="changing only rayVersion recreates the head pod",
        rogue=recreate_head_on_ray_version_change,
        catches=(OPERATOR + "test_ray_version_alone_does_not_change_the_image",),
        bystanders=(OPERATOR + "test_crds_are_served_at_v1_and_v1alpha1_is_kept",),
        evidence="after rayVersion",
    ),
    Fault(
        name="raycronjob-scheduled-with-the-gate-off",
        area="operator",
        misbehaviour="with the RayCronJob gate off, a RayCronJob is scheduled all the same",
        rogue=schedule_raycronjobs_whatever_the_gate,
        catches=(OPERATOR + "test_raycronjob_with_the_gate_off_creates_no_rayjob",),
        bystanders=(OPERATOR + "test_crds_are_served_at_v1_and_v1alpha1_is_kept",),
        evidence="the RayCronJob was scheduled",
    ),
    Fault(
        name="operator-upgrade-makes-a-new-rayservice-cluster",
        area="operator",
        misbehaviour="upgrading the operator from the previous minor makes KubeRay build a new RayCluster "
        "for a RayService (its cluster-spec hash no longer matches), as in #2177",
        rogue=stale_spec_hash_on_changes_that_keep_the_cluster,
        # Only a checkout's run has the previous minor to upgrade from (the module build is that minor).
        on_checkout=True,
        catches=(OPERATOR + "test_operator_upgrade_keeps_pods_and_serving_without_failed_requests",),
        evidence="after the operator upgrade",
    ),
]

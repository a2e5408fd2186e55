"""Pure logic behind the autoscaling, GPU and fault-recovery checks: samples, the state API, manifests."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from conformance import profiles
from conformance.kube import rayservice as rs
from conformance.kube.manifests import manifest_values, render, render_all
from conformance.kube.scaling import (
    GroupReading,
    ScaleReading,
    alive_workers,
    live_proxies,
    partial_replica_streak,
    replica_states,
)
from conformance.profiles import load
from conformance.suites.autoscaling import ScaleDownWindow
from conformance.suites.test_autoscaling_variants import _judge_ramp
from conformance.suites.test_raycluster_lifecycle import _indexed

VALUES: dict[str, Any] = {
    "name": "c",
    "ray_version": "2.58.0",
    "image": "ray:x",
    "pull_policy": "Never",
    "head_resources": {},
    "worker_resources": {"limits": {"cpu": "500m"}, "requests": {"cpu": "100m"}},
    "head_num_cpus": 0,
    "workers": [],
    "autoscaling": False,
    "gpu_resource": "nvidia.com/gpu",
}


def _sample(t: float, pods: int) -> ScaleReading:
    return ScaleReading(t, {"pair": GroupReading(desired=1, pods={"Running": pods} if pods else {})}, None)


def test_alive_workers_counts_alive_non_head_nodes_of_the_state_api() -> None:
    listing = {"data": {"result": {"result": [
        {"state": "ALIVE", "is_head_node": True},
        {"state": "ALIVE", "is_head_node": False},
        {"state": "DEAD", "is_head_node": False},
        {"state": "ALIVE", "is_head_node": False},
    ]}}}  # fmt: skip
    assert alive_workers(listing) == 2


def test_partial_replica_streak_tolerates_one_sample_mid_creation_but_counts_longer_runs() -> None:
    creation = [_sample(0, 0), _sample(2, 1), _sample(4, 2), _sample(6, 0)]
    assert partial_replica_streak(creation, "pair", 2) == 1
    stuck = [_sample(0, 2), _sample(2, 1), _sample(4, 1), _sample(6, 1), _sample(8, 0)]
    assert partial_replica_streak(stuck, "pair", 2) == 3


def test_sample_counts_pods_by_phase_and_in_all() -> None:
    sample = ScaleReading(0, {"g": GroupReading(2, {"Running": 1, "Pending": 1})}, 1)
    assert (sample.pods("g"), sample.pods("g", "Pending"), sample.pods("missing")) == (2, 1, 0)


def test_worker_group_template_carries_gpus_idle_timeout_and_ray_resources() -> None:
    groups = [
        {"name": "gpu", "replicas": 0, "min_replicas": 0, "max_replicas": 2, "gpus": 1, "idle_timeout_s": 15},
        {"name": "res", "replicas": 1, "ray_resources": {"GPU": "3"}, "ray_start_params": {"num-gpus": "1"}},
    ]
    spec = render("ray/raycluster.yaml", **{**VALUES, "workers": groups, "autoscaling": True})["spec"]
    gpu, res = spec["workerGroupSpecs"]
    container = gpu["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"cpu": "500m", "nvidia.com/gpu": "1"}
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert gpu["template"]["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert gpu["idleTimeoutSeconds"] == 15
    assert (res["resources"], res["rayStartParams"]) == ({"GPU": "3"}, {"num-gpus": "1"})
    assert "tolerations" not in res["template"]["spec"]
    assert "nvidia.com/gpu" not in str(res["template"]["spec"]["containers"][0]["resources"])
    assert spec["autoscalerOptions"]["version"] == "v2"


def test_gcs_fault_tolerance_only_when_a_redis_address_is_given() -> None:
    assert "gcsFaultToleranceOptions" not in render("ray/raycluster.yaml", **VALUES)["spec"]
    spec = render("ray/raycluster.yaml", **{**VALUES, "redis_address": "redis:6379"})["spec"]
    assert spec["gcsFaultToleranceOptions"] == {"redisAddress": "redis:6379"}


def test_redis_addon_renders_a_deployment_and_its_service() -> None:
    deployment, service = render_all("addons/redis.yaml", name="redis", image="r:1", pull_policy="Never")
    assert (deployment["kind"], service["kind"]) == ("Deployment", "Service")
    assert service["spec"]["selector"] == deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "r:1"


def test_rayjob_entrypoints_are_python_programs_that_compile() -> None:
    import shlex  # noqa: PLC0415

    from conformance.suites import rayjobs  # noqa: PLC0415

    for entrypoint in (rayjobs.SUCCEEDS, rayjobs.FAILS, rayjobs.runs_for(600), rayjobs.RETRIED_TASK):
        argv = shlex.split(entrypoint)
        assert argv[:2] == ["python", "-c"], entrypoint
        compile(argv[2], entrypoint, "exec")
    assert rayjobs.runs_for(30, "done").endswith("print('done')\"")
    compile(rayjobs.RETRIED_TASK_SCRIPT, "retried task", "exec")
    assert rayjobs.task_attempts("task-done\ntask-attempts 0,1\n") == [0, 1]
    assert rayjobs.task_attempts("task-done\n") == []


@pytest.mark.parametrize("template", ["ray/raycluster.yaml", "ray/rayjob.yaml", "ray/rayservice.yaml"])
def test_the_head_service_type_is_set_only_when_the_profile_exposes_it(template: str) -> None:
    values = rs.rayservice_values(manifest_values(load("default"), "2.58.0"), "x")
    values.update(entrypoint="true", workers=[])

    def head(**extra: str) -> dict:
        spec = render(template, **{**values, **extra})["spec"]
        spec = spec.get("rayClusterSpec") or spec.get("rayClusterConfig") or spec
        return spec["headGroupSpec"]

    assert "serviceType" not in head()
    assert head(head_service_type="LoadBalancer")["serviceType"] == "LoadBalancer"


def test_a_rayservice_head_is_held_back_by_an_init_container_only_when_asked() -> None:
    values = rs.rayservice_values(manifest_values(load("default"), "2.58.0"), "x")

    def head_pod(**extra: Any) -> dict:
        return render("ray/rayservice.yaml", **{**values, **extra})["spec"]["rayClusterConfig"][
            "headGroupSpec"
        ]["template"]["spec"]

    assert "initContainers" not in head_pod()
    (hold,) = head_pod(head_init_sleep_s=30)["initContainers"]
    assert hold["command"] == ["sleep", "30"] and hold["image"] == values["image"]


def test_serve_replicas_are_counted_by_state_for_the_named_deployment() -> None:
    answer = {"applications": {"echo": {"deployments": {
        "Echo": {"replicas": [{"state": "RUNNING"}, {"state": "STARTING"}, {"state": "RUNNING"}]},
        "Other": {"replicas": [{"state": "RUNNING"}]},
    }}}}  # fmt: skip
    states = replica_states(answer, "echo", "Echo")
    assert states == {"RUNNING": 2, "STARTING": 1}
    sample = ScaleReading(0.0, {}, None, states)
    assert (sample.replicas("RUNNING"), sample.replicas("STOPPING"), sample.replicas()) == (2, 0, 3)
    assert ScaleReading(0.0, {}, None).replicas() is None
    with pytest.raises(KeyError):
        replica_states({"applications": {}}, "echo", "Echo")
    proxies = {
        "proxies": {"a": {"status": "HEALTHY"}, "b": {"status": "DRAINING"}, "c": {"status": "DRAINED"}}
    }
    assert live_proxies(proxies) == 2


def test_serve_autoscaling_replaces_the_fixed_replica_count_and_workers_scale_to_the_max() -> None:
    base = rs.rayservice_values(manifest_values(load("default"), "2.58.0"), "x")
    plain = render("ray/rayservice.yaml", **base)["spec"]
    (deployment,) = yaml.safe_load(plain["serveConfigV2"])["applications"][0]["deployments"]
    assert deployment["num_replicas"] == 1 and "autoscaling_config" not in deployment
    scaling = dict(serve_max_replicas=3, target_ongoing_requests=2, upscale_delay_s=3, downscale_delay_s=15,
                   look_back_period_s=10, graceful_shutdown_s=5, replica_cpus=1, delay_s=0.5,
                   autoscaling=True, serve_workers=1, serve_workers_max=3, idle_timeout_s=30)  # fmt: skip
    spec = render("ray/rayservice.yaml", **{**base, **scaling})["spec"]
    (app,) = yaml.safe_load(spec["serveConfigV2"])["applications"]
    (deployment,) = app["deployments"]
    assert "num_replicas" not in deployment and deployment["autoscaling_config"]["max_replicas"] == 3
    assert deployment["ray_actor_options"]["num_cpus"] == 1 and app["args"]["delay_s"] == 0.5
    cluster = spec["rayClusterConfig"]
    assert cluster["autoscalerOptions"]["idleTimeoutSeconds"] == 30
    (group,) = cluster["workerGroupSpecs"]  # the serve group only, not the spare one
    assert (group["groupName"], group["minReplicas"], group["maxReplicas"]) == ("serve", 1, 3)


def test_scale_down_is_judged_against_the_idle_timeout_and_its_slack() -> None:
    window = ScaleDownWindow(idle_s=30, early_s=5, slack_s=30)
    window.check(40.9, "removed in time")
    with pytest.raises(AssertionError, match="before idleTimeoutSeconds=30"):
        window.check(24.0, "too early")
    with pytest.raises(AssertionError, match="later than idleTimeoutSeconds=30 \\+ 30s"):
        window.check(70.0, "too late")


def test_every_bundled_profile_states_the_slacks_the_checks_read() -> None:
    keys = {"scale_down_slack_s", "scale_down_early_slack_s", "deletion_delay_slack_s",
            "traffic_share_tolerance_percent"}  # fmt: skip
    for name in ("default", "kind", "attach", "eks-gpu"):
        # The file itself must state them: the schema's defaults are the local provider's.
        stated = yaml.safe_load((profiles.BUNDLED / f"{name}.yaml").read_text())["thresholds"]
        assert keys <= set(stated), name
        assert all(load(name).thresholds[key] == stated[key] for key in keys), name


@pytest.mark.parametrize(
    ("version", "mode", "ramp", "fine"),
    [
        ("v2", "Default", [6], True),
        ("v2", "Default", [5, 6], True),  # the demand reached the autoscaler in two rounds
        ("v2", "Default", [1, 2, 4, 6], False),  # rate-limited as Conservative
        ("v1", "Aggressive", [6], True),
        ("v1", "Aggressive", [5, 6], False),  # what Conservative does too
        ("v2", "Conservative", [1, 2, 4, 6], True),
        ("v2", "Conservative", [1, 6], False),
        ("v1", "Conservative", [5, 6], True),
    ],
)
def test_upscaling_modes_are_judged_by_the_batches_conservative_allows(
    version: str, mode: str, ramp: list[int], fine: bool
) -> None:
    if fine:
        _judge_ramp(version, mode, ramp, "")
    else:
        with pytest.raises(AssertionError, match="batch"):
            _judge_ramp(version, mode, ramp, "")


def _worker(name: str | None, index: str | None, host: str | None) -> Any:
    from kubernetes import client  # noqa: PLC0415 - only these tests build pods

    labels = {"ray.io/node-type": "worker", "ray.io/worker-group-replica-name": name,
              "ray.io/worker-group-replica-index": index, "ray.io/replica-host-index": host}  # fmt: skip
    meta = client.V1ObjectMeta(labels={k: v for k, v in labels.items() if v is not None})
    ready = client.V1PodStatus(conditions=[client.V1PodCondition(type="Ready", status="True")])
    return client.V1Pod(metadata=meta, status=ready)


def test_replica_indices_must_be_unique_complete_and_shared_by_the_hosts_of_a_replica() -> None:
    single = [_worker(None, "0", None), _worker(None, "1", None), _worker(None, "2", None)]
    assert _indexed(3, 1)(single)
    assert not _indexed(3, 1)([*single[:2], _worker(None, "0", None)])  # a duplicate and a gap
    assert not _indexed(3, 1)([*single[:2], _worker("x", "2", "0")])  # multi-host labels on a single host
    assert not _indexed(4, 1)(single)
    single[0].status.conditions[0].status = "False"
    assert not _indexed(3, 1)(single)  # judged once every worker is Ready
    pairs = [_worker("a", "0", "0"), _worker("a", "0", "1"), _worker("b", "1", "0"), _worker("b", "1", "1")]
    assert _indexed(2, 2)(pairs)
    assert not _indexed(2, 2)([*pairs[:3], _worker("b", "1", "0")])  # a host index twice
    assert not _indexed(2, 2)([*pairs[:3], _worker("b", "0", "1")])  # one replica, two indices
    assert not _indexed(2, 2)([*pairs[:2], _worker("b", "0", "0"), _worker("b", "0", "1")])  # index 0 twice

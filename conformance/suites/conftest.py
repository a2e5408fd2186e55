"""Fixtures shared by the suites: a Ray helper bound to the check's namespace, manifest values."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from conformance.kube.ray import Ray
from conformance.profiles import POD_REQUESTS, Profile


@pytest.fixture
def ray(api: client.ApiClient, namespace: str) -> Ray:
    return Ray(api, namespace)


def resources(limits: dict[str, str]) -> dict[str, Any]:
    """Small requests so a head and two workers fit a 2-core node; Ray sizes itself by the limits."""
    return {"limits": limits, "requests": dict(POD_REQUESTS)}


@pytest.fixture
def cluster_values(profile: Profile, ray_version: str) -> dict[str, Any]:
    return manifest_values(profile, ray_version)


def manifest_values(profile: Profile, ray_version: str) -> dict[str, Any]:
    """Values every Ray manifest template takes, from the profile; checks add their own."""
    return {
        "ray_version": ray_version,
        "image": profile.ray_image(ray_version),
        "pull_policy": profile.pull_policy,
        "head_resources": resources(profile.head_resources),
        "worker_resources": resources(profile.worker_resources),
        "head_num_cpus": 0,
        "workers": [],
        "autoscaling": False,
        "gpu_resource": profile.gpu.resource,
        "head_service_type": profile.head_service_type,
    }

"""Seeded faults the samples area must catch: KubeRay's own sample manifests failing on it."""

from __future__ import annotations

from .faults import Fault

SAMPLE = "test_samples.py::test_sample_works_as_kuberay_ships_it"

FAULTS = [
    Fault(
        name="samples-workers-told-a-cluster-domain-not-served",
        area="samples",
        misbehaviour="KubeRay gives workers a head address in a cluster domain the cluster does not "
        "serve (CLUSTER_DOMAIN): the workers of a sample's cluster, or of a sample RayJob's, never "
        "reach the head, so the samples users start from do not run",
        env={"CLUSTER_DOMAIN": "cluster.invalid"},
        catches=(f"{SAMPLE}[ray-cluster.sample.yaml]", f"{SAMPLE}[ray-job.deletion-rules.yaml]"),
        bystanders=("test_raycluster.py::test_head_only_cluster_becomes_ready",),
        run_args=("--timeout", "ready=90"),  # a sample's cluster is ready within about 40 s here
        evidence="becomes ready",
    ),
]

"""Ray custom resources and their pods, as the checks use them.

Thin on purpose: create/read/patch/delete through the custom objects API, waits built
on `wait.wait_for`, and `exec` into a Ray pod to ask Ray itself.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.stream import stream

from conformance.kube.pods import is_serving
from conformance.kube.wait import behaviour, wait_for
from conformance.stopwatch import READY, spent

GROUP, VERSION = "ray.io", "v1"


class ExecError(Exception):
    pass


class HeadPodMissing(AssertionError, LookupError):
    """A RayCluster that should have one head pod has none or several: KubeRay's doing, a failure."""


class Ray:
    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)

    # -- custom resources -------------------------------------------------------------

    def create(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, body)

    def get(self, plural: str, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name)

    def patch(self, plural: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name, patch)

    def delete(self, plural: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name)

    def list_fn(self, plural: str):  # noqa: ANN201 - a bound list call for wait_for
        def list_objects(**kwargs: Any) -> dict[str, Any]:
            return self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, **kwargs)

        return list_objects

    def wait(
        self, plural: str, name: str, predicate: Any, *, what: str, timeout: float, describe: Any = None
    ) -> dict[str, Any]:
        return wait_for(
            self.list_fn(plural),
            predicate,
            what=what,
            timeout=timeout,
            describe=describe or (lambda obj: str(obj.get("status", {}))[:160]),
            field_selector=f"metadata.name={name}",
        )

    def wait_cluster_ready(self, name: str, timeout: float) -> dict[str, Any]:
        """A wait on KubeRay: running out is the check's failure (see `wait.behaviour`)."""
        with spent(READY), behaviour(f"RayCluster {name} becomes ready"):
            return self._wait_ready(name, timeout)

    def _wait_ready(self, name: str, timeout: float) -> dict[str, Any]:
        return self.wait(
            "rayclusters",
            name,
            lambda obj: obj.get("status", {}).get("state") == "ready",
            what=f"RayCluster {name} to be ready",
            timeout=timeout,
            describe=lambda obj: f"state={obj.get('status', {}).get('state')}",
        )

    # -- pods -------------------------------------------------------------------------

    def pods(self, cluster: str, node_type: str | None = None) -> list[client.V1Pod]:
        selector = f"ray.io/cluster={cluster}"
        if node_type:
            selector += f",ray.io/node-type={node_type}"
        return self.core.list_namespaced_pod(self.namespace, label_selector=selector).items

    def head_pod(self, cluster: str) -> client.V1Pod:
        pods = [p for p in self.pods(cluster, "head") if p.metadata.deletion_timestamp is None]
        if len(pods) != 1:
            phases = [f"{p.metadata.name}: {p.status.phase}" for p in pods]
            raise HeadPodMissing(f"expected one head pod of RayCluster {cluster}, found {len(pods)} {phases}")
        return pods[0]

    def wait_replaced(
        self, cluster: str, lost: client.V1Pod, node_type: str, timeout: float, group: str = ""
    ) -> client.V1Pod:
        """The Ready pod of `node_type` (of worker group `group`, when the cluster has several whose
        pods are no replacement) that KubeRay made in place of the deleted `lost`."""
        selector = f"ray.io/cluster={cluster},ray.io/node-type={node_type}"
        selector += f",ray.io/group={group}" if group else ""
        with behaviour(f"a deleted {node_type} pod of {cluster} is replaced by a Ready one"):
            return wait_for(
                self.core.list_namespaced_pod,
                lambda p: p.metadata.uid != lost.metadata.uid and is_serving(p),
                what=f"a new {node_type} pod of {cluster} to be Ready",
                timeout=timeout,
                describe=lambda p: f"{p.metadata.name} ({p.metadata.uid[:8]}): {p.status.phase}",
                namespace=self.namespace,
                label_selector=selector,
            )

    def exec(self, pod: client.V1Pod, command: list[str], timeout: float = 120) -> str:
        """Run `command` in the pod's first container; raise ExecError on a non-zero exit."""
        resp = stream(
            self.core.connect_get_namespaced_pod_exec,
            pod.metadata.name,
            self.namespace,
            container=pod.spec.containers[0].name,
            command=command,
            stderr=True,
            stdout=True,
            stdin=False,
            tty=False,
            _preload_content=False,
            _request_timeout=timeout,
        )
        resp.run_forever(timeout=timeout)
        out = resp.read_stdout() + resp.read_stderr()
        code = resp.returncode
        resp.close()
        if code != 0:
            raise ExecError(f"{' '.join(command)} exited {code} in {pod.metadata.name}: {out[-800:]}")
        return out

    def python_in_head(self, cluster: str, script: str, timeout: float = 180) -> str:
        return self.exec(self.head_pod(cluster), ["python", "-c", script], timeout=timeout)

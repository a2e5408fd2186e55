"""Ray's own view of which worker pods are its alive nodes: the fault-recovery checks judge recovery
by it, never by pod phases alone."""

from __future__ import annotations

from conformance.kube.pods import is_serving
from conformance.kube.ray import Ray
from conformance.kube.wait import WaitTimeout, poll_until

# Ray's own view of its worker nodes (not the head): one "node <id> <ip> <alive>" line each.
RAY_NODES = """
import ray
ray.init(address="auto", logging_level="ERROR")
for n in ray.nodes():
    if "node:__internal_head__" not in n["Resources"]:
        print("node", n["NodeID"], n["NodeManagerAddress"], n["Alive"])
"""


def ray_workers(ray: Ray, cluster: str) -> dict[str, tuple[str, bool]]:
    """Node id -> (IP, alive) of every worker node the head's GCS knows."""
    out = ray.python_in_head(cluster, RAY_NODES)
    rows = [line.split()[1:] for line in out.splitlines() if line.startswith("node ")]
    return {node: (ip, alive == "True") for node, ip, alive in rows}


def until_workers_alive(ray: Ray, cluster: str, timeout: float) -> dict[str, str]:
    """Ray's own view: until every worker pod of `cluster` is an alive Ray node (matched by pod IP)
    and no other worker node is alive. Returns pod name -> its Ray node id. Asking fails while the
    head is still starting, which is "not yet" too."""
    state = {"seen": "nothing yet"}

    def joined() -> dict[str, str] | None:
        pods = {p.status.pod_ip: p.metadata.name for p in ray.pods(cluster, "worker") if is_serving(p)}
        alive = {ip: node for node, (ip, up) in ray_workers(ray, cluster).items() if up}
        state["seen"] = f"worker pods {sorted(pods)}, alive Ray workers {sorted(alive)}"
        if pods and set(alive) == set(pods):
            return {pods[ip]: node for ip, node in alive.items()}
        return None

    try:
        return poll_until(joined, what=f"the workers of {cluster} alive in Ray", timeout=timeout,
                          retry_on=(Exception,))  # fmt: skip
    except WaitTimeout as exc:
        raise AssertionError(
            f"the worker pods of {cluster} are not Ray's alive workers: {state['seen']}"
        ) from exc


# A detached actor with state, named "counter", for scripts that check state survives a head loss
# (put in them after `import ray`; the head offers no CPU, so it lives on a worker).
COUNTER_ACTOR = """
@ray.remote(num_cpus=0.1, lifetime="detached", name="counter")
class Counter:
    def __init__(self):
        self.value = 0
    def incr(self):
        self.value += 1
        return self.value
"""

"""The one small interface every provider implements, and what suites get from it.

Suites see a `Cluster` and never which provider made it. A provider makes (or attaches
to) a cluster, says how it is doing, and takes down what it made. What only some providers
offer is declared as a protocol of its own (`Preflight`, `ReadsCluster`, `LoadsImages`,
`NodeFaults`) and asked with `isinstance`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from conformance.kube.target import KubeTarget

if TYPE_CHECKING:
    from conformance.build.image_cache import ImageArchive


@dataclass(frozen=True)
class Cluster:
    """What a provider hands the harness: how to reach the cluster and what it offers."""

    provider: str
    kubeconfig: Path
    context: str | None = None
    # Programs the provider brought (kubectl, ctr) come first on PATH for anything the run spawns.
    bin_dirs: tuple[Path, ...] = ()
    # Facts the provider knows and a suite may ask about, e.g. "simulated_gpus": True.
    facts: dict[str, object] = field(default_factory=dict)

    @property
    def target(self) -> KubeTarget:
        """Kubeconfig and context, for the Python client and every helm or kubectl alike."""
        return KubeTarget(self.kubeconfig, self.context)


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    healthy: bool
    detail: str


@dataclass(frozen=True)
class ProviderStatus:
    provider: str
    exists: bool
    components: tuple[ComponentStatus, ...] = ()
    summary: str = ""

    @property
    def healthy(self) -> bool:
        return self.exists and all(c.healthy for c in self.components)


class Provider(Protocol):
    name: str

    def up(self) -> Cluster:
        """Create the cluster, or reuse a healthy one and repair what is broken; idempotent."""
        ...

    def down(self) -> list[str]:
        """Remove everything `up` made; returns what could not be removed (empty when clean)."""
        ...

    def status(self) -> ProviderStatus: ...

    def env(self) -> dict[str, str]:
        """The exports a shell needs to use the cluster (KUBECONFIG, PATH)."""
        ...


@runtime_checkable
class Preflight(Protocol):
    """A provider with checks that need no cluster (tools, credentials, region, budget) and create nothing."""

    def preflight(self) -> object: ...


@runtime_checkable
class ReadsCluster(Protocol):
    """A provider that can say which cluster is its own without changing anything (the existing
    provider cannot: its `up` checks reachability, changing nothing)."""

    def cluster(self) -> Cluster:
        """The cluster as `up` returned it (its kubeconfig may not exist yet)."""
        ...


@runtime_checkable
class LoadsImages(Protocol):
    """A provider whose cluster takes images built on this machine (local, kind): where its builds
    are cached, and how an image gets into every node."""

    cache: Path

    def load_image(self, archive: ImageArchive) -> None: ...


@runtime_checkable
class NodeFaults(Protocol):
    """What a provider offers that can take a worker node away and give it back (the local one);
    the node-fault checks are not applicable on the others."""

    def cluster(self) -> Cluster:
        """The cluster whose nodes these are, as `up` returned it (its kubeconfig may not exist yet)."""
        ...

    def worker_nodes(self) -> list[str]:
        """Names of the nodes a fault may take: never the one the API server runs on."""
        ...

    def stop_node(self, name: str) -> None:
        """As if the machine were lost: its kubelet, container runtime and every pod process stopped."""
        ...

    def start_node(self, name: str) -> None:
        """Start a stopped node's programs again; returns once it is Ready in the cluster."""
        ...

    def isolate_node(self, name: str, cut: bool) -> None:
        """Cut the node off the network (`cut`), its processes left running, or join it again."""
        ...

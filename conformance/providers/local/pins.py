"""Every upstream version the local provider builds, in one place.

Changing a pin here is the only way to change what gets built; the build cache is
keyed by these values, so a changed pin rebuilds exactly the tools it names.
Versions were checked against what the Go module proxy serves on 2026-11-29.
"""

from __future__ import annotations

from dataclasses import dataclass, field

KUBERNETES = "v1.35.4"
# Kubernetes' staging modules (k8s.io/api, client-go, ...) are tagged v0.<minor>.<patch>.
KUBERNETES_STAGING = "v0.35.4"
ETCD = "v3.6.16"
CONTAINERD = "v2.2.9"
COREDNS = "v1.14.7"
KUBERAY = "v1.7.0"
# The operator-upgrade check installs the previous minor first.
KUBERAY_PREVIOUS = "v1.6.1"
RAY = "2.58.0"
DEBIAN_SUITE = "bookworm"


@dataclass(frozen=True)
class GoTool:
    """One Go build module: a main module that requires `module@version` and builds `packages`.

    `go_directive` is the `go` line of the build module; it must not be lower than the
    one of the module it requires. `staging_version` turns the upstream's local-path
    replace directives (Kubernetes' ./staging/src/...) into versioned ones.
    """

    name: str
    module: str
    version: str
    packages: tuple[str, ...]
    go_directive: str
    godebug: str = ""
    staging_version: str = ""
    tags: tuple[str, ...] = ()
    ldflags: tuple[str, ...] = ()
    cgo: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)
    # When the proxy does not serve the pin, build the newest served older release instead
    # (and say so), rather than fail: used for the software under test.
    fallback_to_served: bool = False

    def binary_name(self, package: str) -> str:
        return BINARY_NAMES.get(package, package.rsplit("/", 1)[-1])

    @property
    def binaries(self) -> tuple[str, ...]:
        return tuple(self.binary_name(pkg) for pkg in self.packages)


def _kubernetes_ldflags(version: str) -> tuple[str, ...]:
    major, minor = version.lstrip("v").split(".")[:2]
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return tuple(flags)


TOOLS: dict[str, GoTool] = {
    "kubernetes": GoTool(
        name="kubernetes",
        module="k8s.io/kubernetes",
        version=KUBERNETES,
        packages=tuple(
            f"k8s.io/kubernetes/cmd/{cmd}"
            for cmd in (
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
                "kubelet",
                "kube-proxy",
                "kubectl",
            )
        ),
        go_directive="1.25.0",
        godebug="default=go1.25",
        staging_version=KUBERNETES_STAGING,
        ldflags=_kubernetes_ldflags(KUBERNETES),
    ),
    "etcd": GoTool(
        name="etcd",
        module="go.etcd.io/etcd/server/v3",
        version=ETCD,
        # The server module's root is the etcd main package; name the binary explicitly.
        packages=("go.etcd.io/etcd/server/v3",),
        go_directive="1.26.0",
    ),
    "containerd": GoTool(
        name="containerd",
        module="github.com/containerd/containerd/v2",
        version=CONTAINERD,
        packages=tuple(
            f"github.com/containerd/containerd/v2/cmd/{cmd}"
            for cmd in ("containerd", "ctr", "containerd-shim-runc-v2")
        ),
        go_directive="1.24.3",
        # btrfs and devmapper snapshotters need C headers; overlayfs is all this provider uses.
        tags=("no_btrfs", "no_devmapper", "no_zfs"),
        ldflags=(f"-X github.com/containerd/containerd/v2/version.Version={CONTAINERD}",),
    ),
    "coredns": GoTool(
        name="coredns",
        module="github.com/coredns/coredns",
        version=COREDNS,
        packages=("github.com/coredns/coredns",),
        go_directive="1.25.0",
    ),
    "kuberay": GoTool(
        name="kuberay",
        module="github.com/ray-project/kuberay/ray-operator",
        version=KUBERAY,
        packages=("github.com/ray-project/kuberay/ray-operator",),
        go_directive="1.26.0",
        fallback_to_served=True,
    ),
}

# A binary is named after the last path element of its package, except where that is a
# module root whose last element says nothing about the program.
BINARY_NAMES = {
    "go.etcd.io/etcd/server/v3": "etcd",
    "github.com/ray-project/kuberay/ray-operator": "kuberay-operator",
}

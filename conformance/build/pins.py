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
# The operator-upgrade check starts from the previous minor: the newest release of it the
# proxy serves (gobuild.previous_minor), v1.5.1 for the v1.6.2 this machine builds.
RAY = "2.58.0"
# The Gateway API implementation of the local provider (controller and data plane in one).
# Not v3.7.x: the proxy refuses modules v3.7 needs (lego v5's DNS-provider SDKs, the
# containous/go-http-auth fork it pins), so it cannot be built here.
TRAEFIK = "v3.6.12"
# The Gateway API CRDs (standard channel), from the module's config/crd/standard: the version
# KubeRay's go.mod requires (v1.6.2 and v1.7.0 both build against v1.4.1).
GATEWAY_API = "v1.4.1"
# The open-model load generator of the RayService checks, run as a pod in the cluster.
VEGETA = "v12.13.0"
# The dynamic hostPath provisioner behind the local provider's default StorageClass.
LOCAL_PATH_PROVISIONER = "v0.0.30"
DEBIAN_SUITE = "bookworm"
# Helm installs KubeRay from a checkout's own chart (and from its repository on kind/EKS);
# kustomize deploys a checkout without helm-chart/ as KubeRay's `make deploy` does. Neither
# go.mod has replace directives. kustomize v5.8.3 needs Go 1.27, newer than the local one.
HELM = "v3.22.0"
KUSTOMIZE = "v5.8.2"


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
    # Nested modules of the upstream repository that its go.mod replaces with a local path
    # and that the proxy does not serve on their own: module path -> {file name: content}.
    # The build module gets them as local directories of its own.
    local_modules: dict[str, dict[str, str]] = field(default_factory=dict)

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
    "traefik": GoTool(
        name="traefik",
        module="github.com/traefik/traefik/v3",
        version=TRAEFIK,
        packages=("github.com/traefik/traefik/v3/cmd/traefik",),
        go_directive="1.25.0",
        ldflags=(f"-X github.com/traefik/traefik/v3/pkg/version.Version={TRAEFIK}",),
        # From v3.7 Traefik's go.mod points its dynamic-config extension point at a nested
        # module no proxy serves; upstream it is two empty structs embedded in the HTTP config,
        # so a module declaring them (and nothing else) builds the same program. v3.6 does not
        # require it and ignores the replace; it stays so the pin can move up.
        local_modules={
            "github.com/traefik/traefik/dynamic/ext": {
                "go.mod": "module github.com/traefik/traefik/dynamic/ext\n\ngo 1.24.0\n",
                "ext.go": "// Package ext: the (empty) extension point of Traefik's dynamic config.\n"
                "package ext\n\ntype HTTP struct{}\n\ntype Router struct{}\n",
            }
        },
    ),
    "vegeta": GoTool(
        name="vegeta",
        module="github.com/tsenart/vegeta/v12",
        version=VEGETA,
        packages=("github.com/tsenart/vegeta/v12",),
        go_directive="1.22",
        ldflags=(f"-X main.Version={VEGETA}",),
    ),
    "local-path-provisioner": GoTool(
        name="local-path-provisioner",
        module="github.com/rancher/local-path-provisioner",
        version=LOCAL_PATH_PROVISIONER,
        # The module root is the main package; its go.mod has no replace directives.
        packages=("github.com/rancher/local-path-provisioner",),
        go_directive="1.23.0",
        ldflags=(f"-X main.VERSION={LOCAL_PATH_PROVISIONER}",),
    ),
    "helm": GoTool(
        name="helm",
        module="helm.sh/helm/v3",
        version=HELM,
        packages=("helm.sh/helm/v3/cmd/helm",),
        go_directive="1.26.0",
        ldflags=(f"-X helm.sh/helm/v3/internal/version.version={HELM}",),
    ),
    "kustomize": GoTool(
        name="kustomize",
        module="sigs.k8s.io/kustomize/kustomize/v5",
        version=KUSTOMIZE,
        # The module root is the main package.
        packages=("sigs.k8s.io/kustomize/kustomize/v5",),
        go_directive="1.26.0",
    ),
}

# A binary is named after the last path element of its package, except where that is a
# module root whose last element says nothing about the program.
BINARY_NAMES = {
    "go.etcd.io/etcd/server/v3": "etcd",
    "github.com/ray-project/kuberay/ray-operator": "kuberay-operator",
    "github.com/tsenart/vegeta/v12": "vegeta",
    "github.com/rancher/local-path-provisioner": "local-path-provisioner",
    "sigs.k8s.io/kustomize/kustomize/v5": "kustomize",
}

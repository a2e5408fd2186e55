"""A kind node image built on this machine from what the project already builds.

Where no `kindest/node` image can be pulled (no registry in reach), `kind build node-image`
can still make one, as long as nothing it asks for has to come from a registry:

- `--type file` takes a Kubernetes server tarball (`kubernetes/version` and
  `kubernetes/server/bin/{kubeadm,kubelet,kubectl}` plus the image archives
  `kube-apiserver.tar`, `kube-controller-manager.tar`, `kube-scheduler.tar`, `kube-proxy.tar`).
  We write that tarball from the Kubernetes binaries the local provider builds (and kubeadm,
  built the same way), with each image packed here.
- Every other image the build needs (kubeadm's etcd, CoreDNS and pause; kind's kindnetd,
  local-path-provisioner and local-path-helper) is pulled with `ctr content fetch` unless its
  name is among the tags of those four archives. kind reads the tags from the first
  `repositories` or `manifest.json` member of each archive, and imports every image in it, so
  the extra images ride in `kube-apiserver.tar` as a multi-image docker-archive whose
  `repositories` member comes first and names every tag.
- `--base-image` is a base assembled like kind's images/base/Dockerfile: Debian packages
  (debootstrap), kind's own files from its module, the containerd and crictl built here, and
  the CNI plugins Debian ships.
- `kind build node-image` only speaks the `docker` CLI. With Podman, a `docker` shim that runs
  `podman` is put first on PATH for the build (a present image is not pulled again).

Images that kubeadm or kind ask for by a name whose version we do not build carry that name as
a second tag: `registry.k8s.io/etcd:3.6.6-0` is the etcd this project pins, CoreDNS likewise,
and kind's kindnetd name is the project's kindnet-compatible script (kindnetd's source is not
served by the Go module proxy): it writes each node's CNI config for its pod CIDR and routes
the other nodes' pod CIDRs, which is what kind's default CNI manifest asks of that image. Every
image also carries its own `localhost/kuberay-conformance/...` name and version label.

The finished node image is saved under the cache, keyed by everything that shapes it, so a
warm machine only loads it into the engine (or finds it there).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from conformance.build import gobuild, image_cache, image_pack, pins, small_images
from conformance.build.cache import cache_dir as default_cache_dir
from conformance.build.cache import cache_entry_lock
from conformance.build.commands import run
from conformance.build.rootfs import DEBIAN_MIRROR, debootstrap_command, slim_rootfs
from conformance.errors import ProvisioningError, UsageError
from conformance.progress import progress

KIND_VERSION = "v0.33.0"  # the kind CLI whose node-image layout, files and image names this follows
# cri-tools: the newest release the Go module proxy serves at or below Kubernetes' minor.
CRICTL_VERSION = "v1.34.0"
RECIPE_REVISION = "3"  # bump when the way the node image is made changes
KINDNET_COMPAT_VERSION = "1"
NODE_IMAGE_NAME = "kind-node"
BASE_IMAGE_NAME = "kind-base"
SUPPORTED_ENGINES = ("podman", "docker")

# kind's images/base/Dockerfile package list, less what only storage e2e tests use
# (nfs-common, open-iscsi), plus what kind builds itself and Debian ships: runc and the CNI plugins.
BASE_PACKAGES = (
    "systemd",
    "conntrack",
    "iptables",
    "nftables",
    "iproute2",
    "ethtool",
    "util-linux",
    "mount",
    "kmod",
    "libseccomp2",
    "pigz",
    "fuse-overlayfs",
    "e2fsprogs",
    "bash",
    "ca-certificates",
    "curl",
    "jq",
    "procps",
    "runc",
    "containernetworking-plugins",
)
KUBE_PROXY_PACKAGES = ("iptables", "nftables", "conntrack")  # what kube-proxy execs
CNI_PLUGINS = ("host-local", "loopback", "ptp", "portmap", "bridge")
DEBIAN_CNI_DIR = "usr/lib/cni"
# The server tarball's image archives, in the order kind lists them.
SERVER_IMAGES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
SERVER_BINARIES = ("kubeadm", "kubelet", "kubectl")
# The archive the extra images ride in.
EXTRAS_CARRIER = "kube-apiserver"
STOP_SIGNAL = "SIGRTMIN+3"  # systemd exits on it (SIGTERM makes it re-execute)
ENTRYPOINT = '["/usr/local/bin/entrypoint", "/sbin/init"]'
RECIPE_LABEL = "kuberay-conformance.io/recipe"
MARKER_NAME = "complete"
ARCHIVE_NAME = "image.tar"
NODE_SIDE_SCRIPT = "/kindnet-compat.sh"

# A ptp interface per pod, addresses from the node's pod CIDR, hostPort support: kindnetd's
# own CNI config, without IP masquerade (nothing in these clusters talks off the host).
KINDNET_CONFLIST = """{
  "cniVersion": "0.4.0",
  "name": "kindnet",
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "/run/cni-ipam-state",
        "routes": [{"dst": "0.0.0.0/0"}],
        "ranges": [[{"subnet": "%s"}]]
      },
      "mtu": 1500
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}"""

KINDNET_SCRIPT = r"""#!/bin/sh
# kindnet-compatible node networking, for kind node images built by kuberay-conformance.
# kindnetd's source is not in reach of the machines that build these images, so this does what
# kind's default CNI manifest asks of its image: on every node, write a CNI config for the
# node's pod CIDR and route every other node's pod CIDR via that node's InternalIP.
set -u
CONF=/etc/cni/net.d/10-kindnet.conflist
: "${HOST_IP:?HOST_IP comes from the DaemonSet (status.hostIP)}"
NODES='{range .items[*]}{.spec.podCIDR}{" "}{.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}'
while :; do
  if listing=$(kubectl get nodes -o jsonpath="$NODES" 2>/tmp/kubectl.err); then
    echo "$listing" | while read -r cidr ip _; do
      [ -n "$cidr" ] && [ -n "$ip" ] || continue
      if [ "$ip" = "$HOST_IP" ]; then
        conf=$(printf '%s' '__CONFLIST__' | sed "s#%s#$cidr#")
        if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$conf" ]; then
          printf '%s\n' "$conf" > "$CONF.tmp" && mv "$CONF.tmp" "$CONF" && echo "wrote $CONF for $cidr"
        fi
      elif ! ip route replace "$cidr" via "$ip"; then
        echo "could not route $cidr via $ip"
      fi
    done
  else
    echo "listing nodes failed: $(cat /tmp/kubectl.err)"
  fi
  sleep 5
done
""".replace("__CONFLIST__", KINDNET_CONFLIST)

KIND_COMMIT_PROXY_RESET = 'ENV HTTP_PROXY="" HTTPS_PROXY="" NO_PROXY=""'  # kind's `docker commit --change`
DOCKER_SHIM = """#!/bin/sh
# `docker` for `kind build node-image`, which speaks only the docker CLI: the same command on
# {engine}. An image that is already present is not pulled again (there may be no registry).
# `commit` gets docker's meaning of kind's changes: a new ENTRYPOINT resets CMD (else the node
# would boot `/sbin/init infinity`, the build container's command), and kind's one-line reset of
# the proxy variables is split, since {engine} would read it as a single HTTP_PROXY value.
if [ "$1" = pull ]; then
  for last; do :; done
  if {engine} image exists "$last" 2>/dev/null; then exit 0; fi
fi
if [ "$1" = commit ]; then
  shift
  n=$#
  set -- "$@" --change "CMD []"
  while [ "$n" -gt 0 ]; do
    a=$1
    shift
    n=$((n - 1))
    if [ "$a" = '{proxy_reset}' ]; then
      set -- "$@" 'ENV HTTP_PROXY=""' --change 'ENV HTTPS_PROXY=""' --change 'ENV NO_PROXY=""'
    else
      set -- "$@" "$a"
    fi
  done
  exec {engine} commit "$@"
fi
exec {engine} "$@"
"""


# --- pure helpers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class KindImages:
    """The image names kind's node-image build wants present, besides kubeadm's."""

    kindnetd: str
    local_path_provisioner: str
    local_path_helper: str


@dataclass(frozen=True)
class ArchivePart:
    """One image of a multi-image archive: the first image of `archive`, named `refs`."""

    archive: Path
    refs: tuple[str, ...]


def go_string_constants(source: str) -> dict[str, str]:
    """`const name = "value"` declarations of a Go file (single ones and in blocks)."""
    return dict(re.findall(r'^\s*(?:const\s+)?(\w+)\s*=\s*"([^"\n]*)"\s*$', source, flags=re.MULTILINE))


def kind_images(cni_source: str, storage_source: str) -> KindImages:
    """The add-on images of kind's node-image build, from its const_cni.go and const_storage.go."""
    cni = go_string_constants(cni_source)
    storage = go_string_constants(storage_source)
    try:
        return KindImages(
            kindnetd=cni["kindnetdImage"],
            local_path_provisioner=storage["storageProvisionerImage"],
            local_path_helper=storage["storageHelperImage"],
        )
    except KeyError as exc:
        raise ProvisioningError(
            f"kind's node-image build no longer declares {exc.args[0]}",
            f"check pkg/build/nodeimage of sigs.k8s.io/kind@{KIND_VERSION} and update this builder",
        ) from exc


def kubeadm_images(listing: str) -> dict[str, str]:
    """`kubeadm config images list` output as {component: image reference}."""
    found: dict[str, str] = {}
    for line in listing.split():
        repository, _, tag = line.rpartition(":")
        if not repository or "/" not in repository or not tag:
            continue
        found[repository.rsplit("/", 1)[-1]] = line
    missing = {"kube-apiserver", "kube-proxy", "etcd", "coredns", "pause"} - found.keys()
    if missing:
        raise ProvisioningError(
            f"`kubeadm config images list` named no {', '.join(sorted(missing))}",
            f"check the kubeadm that was built; it printed: {' '.join(listing.split())[:300]}",
        )
    return found


def with_sandbox_image(containerd_config: str, ref: str) -> str:
    """kind's containerd config with its pinned sandbox (pause) image replaced by `ref`."""
    pattern = re.compile(r'^(\s*sandbox_image\s*=\s*)"[^"\n]*"', flags=re.MULTILINE)
    if not pattern.search(containerd_config):
        raise ProvisioningError(
            "kind's containerd config sets no sandbox_image",
            f"check images/base/files/etc/containerd/config.toml of sigs.k8s.io/kind@{KIND_VERSION}",
        )
    return pattern.sub(lambda m: f'{m.group(1)}"{ref}"', containerd_config, count=1)


def cri_base_spec(spec: Mapping[str, object]) -> dict[str, object]:
    """kind's /etc/containerd/cri-base.json from `ctr oci spec`: no rlimits, and its
    createContainer hook that gives each container its own product_name and product_uuid."""
    result = json.loads(json.dumps(spec))
    process = result.get("process")
    if isinstance(process, dict):
        process.pop("rlimits", None)
    hooks = result.setdefault("hooks", {})
    hooks.setdefault("createContainer", []).append({"path": "/kind/bin/mount-product-files.sh"})
    return result


def repositories_member(refs: Sequence[str], layer_ids: Sequence[str]) -> bytes:
    """A docker-archive `repositories` member naming every tag, each with its top layer id."""
    repos: dict[str, dict[str, str]] = {}
    for ref, layer_id in zip(refs, layer_ids, strict=True):
        repository, _, tag = ref.rpartition(":")
        if not repository or "/" in tag:
            raise UsageError(f"{ref!r} has no tag", "name images as repository:tag")
        repos.setdefault(repository, {})[tag] = layer_id
    return json.dumps(repos, sort_keys=True).encode()


def merge_docker_archives(parts: Sequence[ArchivePart], out: Path) -> None:
    """One docker-archive holding the first image of each part, tagged with its refs.

    The `repositories` member comes first and names every tag: kind's node-image build reads
    the tags of an archive from whichever of `repositories` and `manifest.json` comes first,
    and only the first image of `manifest.json`.
    """
    manifest: list[dict[str, object]] = []
    refs: list[str] = []
    layer_ids: list[str] = []
    seen: set[str] = set()
    with tempfile.TemporaryDirectory(dir=out.parent) as scratch, tarfile.open(out, "w") as merged:
        body = Path(scratch) / "body.tar"
        with tarfile.open(body, "w") as staged:
            for part in parts:
                with tarfile.open(part.archive) as source:
                    entries = json.loads(_member(source, "manifest.json"))
                    if not entries:
                        raise ProvisioningError(f"{part.archive} holds no image", "rebuild it")
                    entry = dict(entries[0])
                    entry["RepoTags"] = list(part.refs)
                    manifest.append(entry)
                    refs += part.refs
                    layers = [str(layer) for layer in entry.get("Layers", [])]
                    top = layers[-1].split("/")[0].removesuffix(".tar") if layers else entry["Config"]
                    layer_ids += [str(top).removesuffix(".json")] * len(part.refs)
                    for member in source.getmembers():
                        if member.name in ("manifest.json", "repositories") or member.name in seen:
                            continue
                        seen.add(member.name)
                        staged.addfile(member, source.extractfile(member) if member.isfile() else None)
        for name, data in (
            ("repositories", repositories_member(refs, layer_ids)),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            merged.addfile(info, io.BytesIO(data))
        with tarfile.open(body) as staged:
            for member in staged.getmembers():
                merged.addfile(member, staged.extractfile(member) if member.isfile() else None)


def _member(archive: tarfile.TarFile, name: str) -> bytes:
    handle = archive.extractfile(name)
    if handle is None:
        raise ProvisioningError(f"{archive.name} has no {name}", "rebuild the archive")
    return handle.read()


def archive_tags(path: Path) -> list[str]:
    """The tags kind's node-image build sees in an archive (its GetArchiveTags)."""
    with tarfile.open(path) as archive:
        for member in archive:
            if member.name == "repositories":
                repos = json.loads(_member(archive, member.name))
                return [f"{repo}:{tag}" for repo, tags in repos.items() for tag in tags]
            if member.name == "manifest.json":
                return list(json.loads(_member(archive, member.name))[0].get("RepoTags", []))
    return []


def write_server_tarball(
    out: Path, version: str, binaries: Mapping[str, Path], image_archives: Mapping[str, Path]
) -> None:
    """The Kubernetes server tarball `kind build node-image --type file` reads (gzip, fast)."""
    missing = [name for name in SERVER_BINARIES if name not in binaries]
    missing += [f"{name}.tar" for name in SERVER_IMAGES if name not in image_archives]
    if missing:
        raise ProvisioningError(f"the server tarball lacks {', '.join(missing)}", "build them first")
    with gzip.open(out, "wb", compresslevel=1) as raw, tarfile.open(fileobj=raw, mode="w") as tar:
        data = (version + "\n").encode()
        info = tarfile.TarInfo("kubernetes/version")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for name in SERVER_BINARIES:
            tar.add(str(binaries[name]), arcname=f"kubernetes/server/bin/{name}")
        for name in SERVER_IMAGES:
            tar.add(str(image_archives[name]), arcname=f"kubernetes/server/bin/{name}.tar")


def docker_shim(engine: str) -> str:
    if engine not in SUPPORTED_ENGINES:
        raise UsageError(f"unknown container engine {engine!r}", f"use one of {', '.join(SUPPORTED_ENGINES)}")
    return DOCKER_SHIM.format(engine=engine, proxy_reset=KIND_COMMIT_PROXY_RESET)


def kind_build_argv(kind: Path, tarball: Path, base_ref: str, node_ref: str) -> list[str]:
    return [
        str(kind),
        "build",
        "node-image",
        "--type",
        "file",
        str(tarball),
        "--base-image",
        base_ref,
        "--image",
        node_ref,
    ]


def base_image_changes(recipe: str) -> list[str]:
    """`import --change` instructions: what kind's base Dockerfile sets after its squash."""
    return [
        "ENV container=docker",
        f"STOPSIGNAL {STOP_SIGNAL}",
        f"ENTRYPOINT {ENTRYPOINT}",
        f"LABEL {RECIPE_LABEL}={recipe}",
    ]


def kindnet_conflist(pod_cidr: str) -> str:
    return KINDNET_CONFLIST % pod_cidr


def node_image_ref(kubernetes_version: str, key: str) -> str:
    """The node image's name: the Kubernetes version and the recipe digest as its tag."""
    return image_cache.image_ref(NODE_IMAGE_NAME, f"{kubernetes_version}-{key}")


def recipe_digest(inputs: Mapping[str, object]) -> str:
    blob = json.dumps({"inputs": inputs, "rev": RECIPE_REVISION}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def engine_from_env(env: Mapping[str, str], available: Sequence[str]) -> str:
    """Which engine kind will use: KIND_EXPERIMENTAL_PROVIDER as kind reads it, else docker,
    else podman, whichever is installed (kind's own order)."""
    chosen = env.get("KIND_EXPERIMENTAL_PROVIDER", "")
    if chosen:
        if chosen not in SUPPORTED_ENGINES:
            raise UsageError(
                f"KIND_EXPERIMENTAL_PROVIDER={chosen!r} is not an engine this builder drives",
                f"use one of {', '.join(SUPPORTED_ENGINES)}",
            )
        if chosen not in available:
            raise ProvisioningError(f"{chosen} is not installed", f"install {chosen} or unset the variable")
        return chosen
    for engine in SUPPORTED_ENGINES[::-1]:  # docker first, as kind itself prefers it
        if engine in available:
            return engine
    raise ProvisioningError(
        "no container engine (docker or podman) is installed", "install podman or docker for kind's nodes"
    )


# --- tools ------------------------------------------------------------------------------------


def kubeadm_tool() -> pins.GoTool:
    """kubeadm, built exactly like the local provider's Kubernetes binaries (same pin, flags)."""
    return dataclasses.replace(
        pins.TOOLS["kubernetes"], name="kubeadm", packages=("k8s.io/kubernetes/cmd/kubeadm",)
    )


def crictl_tool() -> pins.GoTool:
    return pins.GoTool(
        name="crictl",
        module="sigs.k8s.io/cri-tools",
        version=CRICTL_VERSION,
        packages=("sigs.k8s.io/cri-tools/cmd/crictl",),
        go_directive="1.24.1",
        ldflags=(f"-X sigs.k8s.io/cri-tools/pkg/version.Version={CRICTL_VERSION}",),
    )


def kind_tool() -> pins.GoTool:
    """The kind CLI (its go.mod has no replace directives: `go install` would do the same)."""
    return pins.GoTool(
        name="kind",
        module="sigs.k8s.io/kind",
        version=KIND_VERSION,
        packages=("sigs.k8s.io/kind",),
        go_directive="1.22",
    )


# --- building ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeImage:
    ref: str
    archive: Path
    kubernetes: str
    engine: str
    build_seconds: float  # of the cold build that made the cached archive
    seconds: float  # this call: 0-ish when the engine had it, a load, or the cold build


@dataclass(frozen=True)
class _Parts:
    kind: Path
    kubernetes: Path
    kubeadm: Path
    etcd: Path
    coredns: Path
    containerd: Path
    crictl: Path
    local_path: Path
    kind_dir: Path


def _parts(cache: Path) -> tuple[_Parts, dict[str, object]]:
    tools = {
        "kind": kind_tool(),
        "kubernetes": pins.TOOLS["kubernetes"],
        "kubeadm": kubeadm_tool(),
        "etcd": pins.TOOLS["etcd"],
        "coredns": pins.TOOLS["coredns"],
        "containerd": pins.TOOLS["containerd"],
        "crictl": crictl_tool(),
        "local_path": pins.TOOLS["local-path-provisioner"],
    }
    dirs = {name: gobuild.ensure_built(tool, cache) for name, tool in tools.items()}
    kind_dir = gobuild.module_dir("sigs.k8s.io/kind", KIND_VERSION)
    parts = _Parts(kind_dir=kind_dir, **dirs)
    inputs: dict[str, object] = {name: gobuild.recipe_key(tool) for name, tool in tools.items()}
    inputs.update(
        {
            "suite": pins.DEBIAN_SUITE,
            "mirror": DEBIAN_MIRROR,
            "base_packages": list(BASE_PACKAGES),
            "kube_proxy_packages": list(KUBE_PROXY_PACKAGES),
            "kindnet_script": hashlib.sha256(KINDNET_SCRIPT.encode()).hexdigest(),
            "docker_shim": hashlib.sha256(DOCKER_SHIM.encode()).hexdigest(),
            "pause": hashlib.sha256(small_images.PAUSE_SOURCE.read_bytes()).hexdigest(),
            "busybox": _busybox_version(),
        }
    )
    return parts, inputs


def ensure_node_image(cache: Path | None = None, engine: str | None = None) -> NodeImage:
    """The node image for the pinned Kubernetes, present in `engine`; built once per recipe."""
    started = time.monotonic()
    cache = cache or default_cache_dir()
    engine = engine or engine_from_env(os.environ, [e for e in SUPPORTED_ENGINES if shutil.which(e)])
    parts, inputs = _parts(cache)
    version = pins.KUBERNETES
    key = recipe_digest(inputs)
    ref = node_image_ref(version, key)
    root = cache / "images" / f"{NODE_IMAGE_NAME}-{version}-{key}"
    archive = root / ARCHIVE_NAME
    with cache_entry_lock(root.with_name(root.name + ".lock")):
        if not _complete(root, ref):
            partial = root.with_name(root.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            (partial / "recipe.json").write_text(json.dumps(inputs, indent=2, sort_keys=True) + "\n")
            build_started = time.monotonic()
            _build(parts, cache, engine, ref, key, partial)
            marker = {
                "ref": ref,
                "engine": engine,
                "build_seconds": round(time.monotonic() - build_started, 1),
                "archive_bytes": (partial / ARCHIVE_NAME).stat().st_size,
            }
            (partial / MARKER_NAME).write_text(json.dumps(marker) + "\n")
            shutil.rmtree(root, ignore_errors=True)
            partial.rename(root)
        elif not _engine_has(engine, ref):
            with progress(f"loading {ref} into {engine}"):
                run([engine, "load", "-i", str(archive)], root / "load.log", f"{engine} load", "see the log")
    marker = json.loads((root / MARKER_NAME).read_text())
    return NodeImage(
        ref=ref,
        archive=archive,
        kubernetes=version,
        engine=engine,
        build_seconds=float(marker["build_seconds"]),
        seconds=round(time.monotonic() - started, 1),
    )


def _complete(root: Path, ref: str) -> bool:
    try:
        return json.loads((root / MARKER_NAME).read_text())["ref"] == ref and (root / ARCHIVE_NAME).is_file()
    except (OSError, ValueError, KeyError):
        return False


def _engine_has(engine: str, ref: str) -> bool:
    done = subprocess.run([engine, "image", "inspect", ref], capture_output=True, check=False)
    return done.returncode == 0


def _build(parts: _Parts, cache: Path, engine: str, ref: str, key: str, work: Path) -> None:
    log = work / "build.log"
    version = pins.KUBERNETES
    with progress(f"building kind node image {ref}") as line:
        line.update("kubeadm image names")
        wanted = kubeadm_images(
            run(
                [str(parts.kubeadm / "kubeadm"), "config", "images", "list", "--kubernetes-version", version],
                log,
                "kubeadm config images list",
                "check the kubeadm build",
                capture=True,
            )
        )
        nodeimage = parts.kind_dir / "pkg/build/nodeimage"
        addons = kind_images(
            (nodeimage / "const_cni.go").read_text(), (nodeimage / "const_storage.go").read_text()
        )
        pause = small_images.pause_image(cache)
        line.update("component images")
        server_images = _component_images(parts, work, wanted, addons, pause, log, line)
        line.update("server tarball")
        tarball = work / "kubernetes-server-linux-amd64.tar.gz"
        binaries = {
            "kubeadm": parts.kubeadm / "kubeadm",
            "kubelet": parts.kubernetes / "kubelet",
            "kubectl": parts.kubernetes / "kubectl",
        }
        write_server_tarball(tarball, pins.KUBERNETES, binaries, server_images)
        for archive in server_images.values():
            archive.unlink()
        line.update("base image (debootstrap)")
        base_ref = image_cache.image_ref(BASE_IMAGE_NAME, f"{KIND_VERSION}-{key}")
        _base_image(parts, engine, base_ref, pause.ref, key, work, log)
        try:
            line.update("kind build node-image")
            _kind_build(parts.kind / "kind", engine, tarball, base_ref, ref, work, log)
        finally:
            subprocess.run([engine, "rmi", base_ref], capture_output=True, check=False)
        tarball.unlink()
        line.update(f"{engine} save")
        run([engine, "save", "-o", str(work / ARCHIVE_NAME), ref], log, f"{engine} save", "see the log")


def _component_images(
    parts: _Parts,
    work: Path,
    wanted: Mapping[str, str],
    addons: KindImages,
    pause: image_cache.ImageArchive,
    log: Path,
    line: object,
) -> dict[str, Path]:
    """The four server image archives; the extra images ride in kube-apiserver.tar."""
    version = pins.KUBERNETES
    singles = work / "singles"
    singles.mkdir()
    own = image_cache.REGISTRY

    def static(name: str, tag: str, files: Mapping[str, Path], entrypoint: tuple[str, ...]) -> Path:
        rootfs = singles / f"{name}-rootfs"
        _minimal_rootfs(rootfs)
        for target, source in files.items():
            _install(source, rootfs / target.lstrip("/"))
        out = singles / f"{name}.tar"
        config = image_cache.ImageConfig(
            entrypoint=entrypoint,
            env=(f"PATH={image_cache.SYSTEM_PATH}",),
            user="0:0",
            labels={"org.opencontainers.image.version": tag},
        )
        image_pack.pack_rootfs_tar(rootfs, f"{own}/{name}:{tag}", config, out)
        shutil.rmtree(rootfs)
        return out

    archives: dict[str, Path] = {}
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        binary = parts.kubernetes / name
        archives[name] = static(
            name, version, {f"/usr/local/bin/{name}": binary}, (f"/usr/local/bin/{name}",)
        )
    line.update("kube-proxy image (debootstrap)")  # type: ignore[attr-defined]
    archives["kube-proxy"] = _kube_proxy_image(parts, singles, log)
    etcd = static("etcd", pins.ETCD, {"/usr/local/bin/etcd": parts.etcd / "etcd"}, ("/usr/local/bin/etcd",))
    coredns = static("coredns", pins.COREDNS, {"/coredns": parts.coredns / "coredns"}, ("/coredns",))
    local_path = static(
        "local-path-provisioner",
        pins.LOCAL_PATH_PROVISIONER,
        {"/usr/local/bin/local-path-provisioner": parts.local_path / "local-path-provisioner"},
        ("/usr/local/bin/local-path-provisioner",),
    )
    helper = _busybox_image(singles, "local-path-helper", {}, ("/bin/sh",))
    kindnet = _busybox_image(
        singles,
        "kindnet-compat",
        {"/usr/local/bin/kubectl": parts.kubernetes / "kubectl"},
        ("/bin/sh", NODE_SIDE_SCRIPT),
        script=KINDNET_SCRIPT,
    )
    line.update("merging image archives")  # type: ignore[attr-defined]
    carrier = singles / f"{EXTRAS_CARRIER}-merged.tar"
    merge_docker_archives(
        [
            ArchivePart(archives[EXTRAS_CARRIER], (wanted[EXTRAS_CARRIER],)),
            ArchivePart(etcd, (wanted["etcd"], f"{own}/etcd:{pins.ETCD}")),
            ArchivePart(coredns, (wanted["coredns"], f"{own}/coredns:{pins.COREDNS}")),
            ArchivePart(pause.path, (pause.ref,)),
            ArchivePart(kindnet, (addons.kindnetd, f"{own}/kindnet-compat:{KINDNET_COMPAT_VERSION}")),
            ArchivePart(
                local_path,
                (
                    addons.local_path_provisioner,
                    f"{own}/local-path-provisioner:{pins.LOCAL_PATH_PROVISIONER}",
                ),
            ),
            ArchivePart(helper, (addons.local_path_helper, f"{own}/local-path-helper:busybox")),
        ],
        carrier,
    )
    result: dict[str, Path] = {}
    for name in SERVER_IMAGES:
        out = work / f"{name}.tar"
        if name == EXTRAS_CARRIER:
            carrier.rename(out)
        else:
            merge_docker_archives([ArchivePart(archives[name], (wanted[name],))], out)
        result[name] = out
    shutil.rmtree(singles)
    return result


def _minimal_rootfs(rootfs: Path) -> None:
    etc = rootfs / "etc"
    etc.mkdir(parents=True)
    (etc / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532::/home/nonroot:/bin/sh\n"
    )
    (etc / "group").write_text("root:x:0:\nnonroot:x:65532:\n")
    (etc / "nsswitch.conf").write_text("hosts: files dns\n")
    (rootfs / "tmp").mkdir()
    (rootfs / "tmp").chmod(0o1777)


def _install(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    target.chmod(0o755)


def _busybox_version() -> str:
    done = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "busybox-static"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0 or not Path("/bin/busybox").exists():
        raise ProvisioningError("busybox-static is not installed", "apt-get install -y busybox-static")
    return done.stdout.strip()


def _busybox_image(
    singles: Path,
    name: str,
    files: Mapping[str, Path],
    entrypoint: tuple[str, ...],
    script: str = "",
) -> Path:
    rootfs = singles / f"{name}-rootfs"
    _minimal_rootfs(rootfs)
    bin_dir = rootfs / "bin"
    bin_dir.mkdir()
    _install(Path("/bin/busybox"), bin_dir / "busybox")
    applets = subprocess.run(["/bin/busybox", "--list"], capture_output=True, text=True, check=True).stdout
    for applet in applets.split():
        if applet != "busybox":
            (bin_dir / applet).symlink_to("busybox")
    for target, source in files.items():
        _install(source, rootfs / target.lstrip("/"))
    if script:
        (rootfs / NODE_SIDE_SCRIPT.lstrip("/")).write_text(script)
        (rootfs / NODE_SIDE_SCRIPT.lstrip("/")).chmod(0o755)
    out = singles / f"{name}.tar"
    config = image_cache.ImageConfig(
        entrypoint=entrypoint,
        env=("PATH=/usr/local/bin:/bin",),
        user="0:0",
        labels={"org.opencontainers.image.version": _busybox_version()},
    )
    image_pack.pack_rootfs_tar(rootfs, f"{image_cache.REGISTRY}/{name}:busybox", config, out)
    shutil.rmtree(rootfs)
    return out


def _debootstrap(rootfs: Path, packages: Sequence[str], log: Path) -> None:
    if not shutil.which("debootstrap"):
        raise ProvisioningError("debootstrap is not installed", "apt-get install -y debootstrap")
    argv = ["unshare", "--mount", "--propagation", "private"]
    argv += debootstrap_command(pins.DEBIAN_SUITE, rootfs, DEBIAN_MIRROR, packages)
    run(argv, log, f"debootstrap {pins.DEBIAN_SUITE}", f"check that {DEBIAN_MIRROR} is reachable")


def _copy_tree(source: Path, target: Path) -> None:
    """Copy kind's files with the modes its Dockerfile gives them (the module cache is read-only):
    directories and programs (usr/local/bin, kind/bin) 0755, everything else 0644."""
    for path in sorted([source, *source.rglob("*")]):
        copied = target / path.relative_to(source)
        if path.is_dir():
            copied.mkdir(parents=True, exist_ok=True)
            copied.chmod(0o755)
            continue
        shutil.copyfile(path, copied)
        program = copied.parent.name == "bin" and copied.parent.parent.name in ("local", "kind")
        copied.chmod(0o755 if program else 0o644)


def _kube_proxy_image(parts: _Parts, singles: Path, log: Path) -> Path:
    rootfs = singles / "kube-proxy-rootfs"
    _debootstrap(rootfs, KUBE_PROXY_PACKAGES, log)
    slim_rootfs(rootfs, extra=("dev/*",))  # the runtime mounts /dev
    _install(parts.kubernetes / "kube-proxy", rootfs / "usr/local/bin/kube-proxy")
    out = singles / "kube-proxy.tar"
    config = image_cache.ImageConfig(
        entrypoint=("/usr/local/bin/kube-proxy",),
        env=(f"PATH={image_cache.SYSTEM_PATH}",),
        user="0:0",
        labels={"org.opencontainers.image.version": pins.KUBERNETES},
    )
    image_pack.pack_rootfs_tar(rootfs, f"{image_cache.REGISTRY}/kube-proxy:{pins.KUBERNETES}", config, out)
    shutil.rmtree(rootfs)
    return out


def _base_image(
    parts: _Parts, engine: str, base_ref: str, pause_ref: str, key: str, work: Path, log: Path
) -> None:
    """kind's images/base, assembled: Debian packages, kind's files, containerd, crictl, CNI."""
    rootfs = work / "base-rootfs"
    _debootstrap(rootfs, BASE_PACKAGES, log)
    files = parts.kind_dir / "images/base/files"
    for sub in ("usr/local/bin", "kind", "etc", "LICENSES"):
        _copy_tree(files / sub, rootfs / sub)
    config = rootfs / "etc/containerd/config.toml"
    config.write_text(with_sandbox_image(config.read_text(), pause_ref))
    for name in ("containerd", "ctr", "containerd-shim-runc-v2"):
        _install(parts.containerd / name, rootfs / "usr/local/bin" / name)
    _install(parts.crictl / "crictl", rootfs / "usr/local/bin/crictl")
    for plugin in CNI_PLUGINS:
        _install(rootfs / DEBIAN_CNI_DIR / plugin, rootfs / "opt/cni/bin" / plugin)
    spec = json.loads(
        run([str(parts.containerd / "ctr"), "oci", "spec"], log, "ctr oci spec", "", capture=True)
    )
    (rootfs / "etc/containerd/cri-base.json").write_text(json.dumps(cri_base_spec(spec), indent=2) + "\n")
    # What kind's Dockerfile does after installing the packages.
    for pattern in (
        "lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service",
        "lib/systemd/system/multi-user.target.wants/*",
        "etc/systemd/system/*.wants/*",
        "lib/systemd/system/local-fs.target.wants/*",
        "lib/systemd/system/sockets.target.wants/*udev*",
        "lib/systemd/system/sockets.target.wants/*initctl*",
        "lib/systemd/system/basic.target.wants/*",
    ):
        for path in rootfs.glob(pattern):
            path.unlink()
    with (rootfs / "etc/systemd/journald.conf").open("a") as journald:
        journald.write("ReadKMsg=no\n")
    (rootfs / "sbin/init").unlink(missing_ok=True)
    (rootfs / "sbin/init").symlink_to("/usr/lib/systemd/systemd")
    systemctl = ["chroot", str(rootfs), "systemctl"]
    run([*systemctl, "enable", "kubelet.service", "containerd.service", "undo-mount-hacks.service"], log,
         "systemctl enable", "see the log")  # fmt: skip
    run([*systemctl, "mask", "systemd-binfmt.service"], log, "systemctl mask", "see the log")
    (rootfs / "etc/kubernetes/manifests").mkdir(parents=True, exist_ok=True)
    slim_rootfs(rootfs, extra=("dev/*",))  # the runtime mounts /dev
    (rootfs / "etc/machine-id").write_text("")
    changes = [arg for change in base_image_changes(key) for arg in ("--change", change)]
    with log.open("a") as sink:
        tar = subprocess.Popen(
            ["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", "-", "."],
            stdout=subprocess.PIPE,
            stderr=sink,
        )
        done = subprocess.run(
            [engine, "import", *changes, "-", base_ref],
            stdin=tar.stdout,
            stdout=sink,
            stderr=sink,
            check=False,
        )
        assert tar.stdout is not None
        tar.stdout.close()
        tar_rc = tar.wait()
    if done.returncode != 0 or tar_rc != 0:
        raise ProvisioningError(f"{engine} import of the kind base image failed", f"see {log}")
    shutil.rmtree(rootfs)


def _kind_build(
    kind: Path, engine: str, tarball: Path, base_ref: str, ref: str, work: Path, log: Path
) -> None:
    env = dict(os.environ)
    tmp = work / "tmp"  # kind extracts the tarball under TMPDIR and leaves it there
    tmp.mkdir()
    env["TMPDIR"] = str(tmp)
    if engine == "podman":
        shim_dir = tmp / "docker-shim"
        shim_dir.mkdir()
        (shim_dir / "docker").write_text(docker_shim(engine))
        (shim_dir / "docker").chmod(0o755)
        env["PATH"] = f"{shim_dir}{os.pathsep}{env.get('PATH', '')}"
    try:
        run(
            kind_build_argv(kind, tarball, base_ref, ref),
            log,
            "kind build node-image",
            f"see the log; kind {KIND_VERSION} drives `docker` ({engine})",
            env=env,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

"""A default StorageClass for the local provider: Rancher's local-path-provisioner, built here.

kind offers the same provisioner as its default class; the local provider does likewise, so
claims that name no class (the data-preservation checks') get a hostPath volume made on
demand. The program is built from its Go module, its image holds that one binary, and the
helper pods that create and remove volume directories run the toolbox image (Debian's static
busybox). Volumes live below the provider's state directory, which `cluster down` removes.

Idempotent: a second call re-applies the same objects; a rebuilt binary rolls the pod.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.dynamic import DynamicClient

from conformance.build import gobuild, image_cache, pins, small_images
from conformance.install import kuberay
from conformance.kube import apply, rollout
from conformance.kube.manifests import render_all
from conformance.progress import progress

NAMESPACE = "kuberay-conformance-storage"
TEMPLATE = "storage/local-path-provisioner.yaml"
CLASS_NAME = "local-path"
PROVISIONER_NAME = "rancher.io/local-path"
TOOL = "local-path-provisioner"


@dataclass(frozen=True)
class StorageImages:
    provisioner: image_cache.ImageArchive
    helper: image_cache.ImageArchive  # runs the setup and teardown scripts: a shell and nothing else


def build_images(cache: Path, kubectl: Path) -> StorageImages:
    """The provisioner's image (its one binary, built from the Go module proxy) and the helper's
    (the toolbox: Debian's static busybox, and kubectl, which the helper does not use)."""
    tool = pins.TOOLS[TOOL]
    bin_dir = gobuild.ensure_built(tool, cache)
    provisioner = small_images.binary_image(cache, TOOL, tool.version, bin_dir / TOOL, [f"/{TOOL}"])
    return StorageImages(provisioner, small_images.toolbox_image(cache, kubectl))


def render(image: str, helper_image: str, node_path: Path, image_build: str) -> list[dict[str, Any]]:
    return render_all(
        TEMPLATE,
        namespace=NAMESPACE,
        image=image,
        helper_image=helper_image,
        version=pins.LOCAL_PATH_PROVISIONER,
        managed_by=apply.MANAGED_BY,
        node_path=str(node_path),
        class_name=CLASS_NAME,
        provisioner_name=PROVISIONER_NAME,
        image_build=image_build,
    )


def install_local(
    provider: kuberay.ImageLoader,
    api_client: client.ApiClient,
    built: StorageImages,
    node_path: Path,
    timeout: float,
) -> None:
    """Load both images, apply the manifest, and wait for the provisioner to run."""
    provider.load_image(built.provisioner)
    provider.load_image(built.helper)
    dynamic = DynamicClient(api_client)
    docs = render(
        built.provisioner.ref, built.helper.ref, node_path, image_cache.archive_id(built.provisioner)
    )
    with progress(f"applying local-path-provisioner {pins.LOCAL_PATH_PROVISIONER} to {NAMESPACE}") as line:
        for doc in docs:  # the Namespace first: the manifest lists it first
            line.update(f"{doc['kind']}/{doc['metadata']['name']}")
            apply.apply_object(dynamic, doc)
    rollout.wait_rolled_out(api_client, NAMESPACE, "local-path-provisioner", timeout)

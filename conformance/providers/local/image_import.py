"""Images into the local cluster's containerd (`ctr images import`), pinned against image GC."""

from __future__ import annotations

from pathlib import Path

from conformance.build.commands import run
from conformance.build.image_cache import ImageArchive, archive_id
from conformance.errors import ProvisioningError
from conformance.progress import progress

ARCHIVE_LABEL = "kuberay-conformance.io/archive"
CRI_PINNED_LABEL = "io.cri-containerd.pinned=pinned"  # the CRI plugin reports these as pinned: no image GC


def import_command(archive: ImageArchive, ctr: Path, address: Path, namespace: str, pin: bool) -> list[str]:
    # No --base-name: ctr then keeps full references from RepoTags as they are (it only
    # prefixes bare tags). No --local: the daemon's transfer service imports and unpacks
    # for the default platform into the default snapshotter (overlayfs), which CRI uses.
    cmd = [str(ctr), "--address", str(address), "-n", namespace, "images", "import"]
    cmd += ["--label", f"{ARCHIVE_LABEL}={archive_id(archive)}"]
    if pin:
        cmd += ["--label", CRI_PINNED_LABEL]
    return [*cmd, str(archive.path)]


def import_image(
    archive: ImageArchive, ctr: Path, address: Path, namespace: str = "k8s.io", *, pin: bool = True
) -> None:
    """Import into containerd and check the image is there under `archive.ref`.

    `pin` labels the image io.cri-containerd.pinned=pinned: the CRI plugin reports it as
    pinned and the kubelet's image GC never removes it, since nothing can be pulled again.
    """
    log = archive.path.with_name("import.log")
    log.write_text("")
    fix = f"check that containerd is running and listening on {address}"
    ctr_images = [str(ctr), "--address", str(address), "-n", namespace, "images", "ls", "-q"]
    same_build = f'name=={archive.ref},labels."{ARCHIVE_LABEL}"=={archive_id(archive)}'
    if archive.ref in run([*ctr_images, same_build], log, "ctr images ls", fix, capture=True).split():
        return  # this very build is already there; importing 500 MB again would change nothing
    with progress(f"importing {archive.ref} into containerd"):
        run(import_command(archive, ctr, address, namespace, pin), log, f"ctr import of {archive.ref}", fix)
        listed = run(
            [str(ctr), "--address", str(address), "-n", namespace, "images", "ls", "-q"],
            log,
            "ctr images ls",
            fix,
            capture=True,
        )
    if archive.ref not in listed.split():
        raise ProvisioningError(
            f"ctr imported {archive.path} but no image is named {archive.ref}",
            f"compare the archive's manifest.json RepoTags with `ctr -n {namespace} images ls`; log: {log}",
        )

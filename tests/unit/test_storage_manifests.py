"""The volume the data-preservation checks mount: a static hostPath one only for its own claim."""

from __future__ import annotations

from conformance.kube.manifests import render_all


def test_static_volume_is_bound_to_its_claim_only() -> None:
    objects = render_all(
        "storage/volume.yaml",
        static_pv=True,
        pv_name="pv",
        run_id="r",
        namespace="ns",
        claim="data",
        host_path="/var/tmp/x",
    )
    pv, pvc = objects
    assert pv["spec"]["claimRef"] == {"namespace": "ns", "name": "data"}
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pvc["spec"]["volumeName"] == "pv" and pvc["spec"]["storageClassName"] == ""
    (dynamic,) = render_all("storage/volume.yaml", static_pv=False, namespace="ns", claim="data")
    assert "storageClassName" not in dynamic["spec"]  # the default StorageClass provisions it

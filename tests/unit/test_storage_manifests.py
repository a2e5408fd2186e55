"""The claim the data-preservation checks make, and when they are not applicable."""

from __future__ import annotations

from conformance.capabilities import Capabilities
from conformance.kube.manifests import render


def test_the_claim_names_no_class_so_the_default_one_provisions_it() -> None:
    claim = render("storage/volume.yaml", namespace="ns", claim="data")
    assert claim["kind"] == "PersistentVolumeClaim"
    assert claim["metadata"] == {"name": "data", "namespace": "ns"}
    assert "storageClassName" not in claim["spec"] and "volumeName" not in claim["spec"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_checks_without_a_default_class_are_not_applicable_with_the_reason() -> None:
    none = Capabilities(kubernetes_version="v1.35.4", kuberay_version="v1.6.2")
    assert "no default StorageClass" in none.missing("default_storage_class")
    one = Capabilities(
        kubernetes_version="v1.35.4", kuberay_version="v1.6.2", default_storage_classes=("local-path",)
    )
    assert one.missing("default_storage_class") == ""

import json
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from conformance.errors import UsageError
from conformance.providers.local import components
from conformance.providers.local.cgroup_layout import CgroupMode
from conformance.providers.local.journal import Change, HostJournal
from conformance.providers.local.layout import Network, StateLayout
from conformance.providers.local.pki import CertificateAuthority, ClientIdentity, write_kubeconfig
from conformance.timeouts import Timeouts


def test_network_addresses_are_derived_from_the_ranges() -> None:
    net = Network()
    assert (net.host_ip, net.node_ip, net.prefix_len) == ("10.213.0.1", "10.213.0.2", 30)
    assert net.node_pod_cidr == "10.214.0.0/24"
    assert net.kubernetes_service_ip == "10.215.0.1"
    assert net.dns_service_ip == "10.215.0.10"


def test_kubelet_config_keeps_images_and_accepts_cgroup_v1(tmp_path: Path) -> None:
    cfg = components.kubelet_config(StateLayout(tmp_path), Network(), CgroupMode.HYBRID)
    assert cfg["failCgroupV1"] is False
    assert cfg["cgroupDriver"] == "cgroupfs"
    assert cfg["imageGCHighThresholdPercent"] == 100
    assert cfg["clusterDNS"] == ["10.215.0.10"]


def test_cni_config_masquerades_from_the_node_pod_range_only(tmp_path: Path) -> None:
    conf = json.loads(components.cni_config(StateLayout(tmp_path), Network()))
    bridge = conf["plugins"][0]
    assert bridge["ipMasq"] is True
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.214.0.0/24"}]]


def test_corefile_never_forwards(tmp_path: Path) -> None:
    text = components.corefile(StateLayout(tmp_path), Network())
    plugins = [line.split()[0] for line in text.splitlines() if line.strip()]
    assert "forward" not in plugins and "proxy" not in plugins
    assert "kubernetes cluster.local" in text


def test_journal_keeps_changes_in_order_without_duplicates(tmp_path: Path) -> None:
    journal = HostJournal(tmp_path / "j.json")
    journal.record(Change("netns", "a"))
    journal.record(Change("link", "b"))
    journal.record(Change("netns", "a"))
    journal.record(Change("sysctl", "kernel.panic", "1"))
    journal.record(Change("sysctl", "kernel.panic", "10"))  # what kubelet set, seen by a second `up`
    assert journal.entries() == [
        Change("netns", "a"),
        Change("link", "b"),
        Change("sysctl", "kernel.panic", "1"),
    ]


def test_kubeconfig_inlines_a_certificate_signed_by_the_ca(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    ca.ensure()
    cert, key = ca.issue_client(ClientIdentity("admin", "kubernetes-admin", ("system:masters",)))
    issued = x509.load_pem_x509_certificate(cert.read_bytes())
    assert issued.issuer.rfc4514_string() == "CN=kuberay-conformance-ca"
    assert issued.subject.rfc4514_string() == "CN=kubernetes-admin,O=system:masters"
    path = tmp_path / "kubeconfig"
    write_kubeconfig(
        path, server="https://10.0.0.1:6443", ca=ca.cert_path, cert=cert, key=key, user="admin", cluster="c"
    )
    loaded = yaml.safe_load(path.read_text())
    assert loaded["clusters"][0]["cluster"]["server"] == "https://10.0.0.1:6443"
    assert path.stat().st_mode & 0o077 == 0


def test_timeouts_take_overrides_and_refuse_unknown_kinds() -> None:
    assert Timeouts().with_overrides({"ready": 10}).ready == 10
    with pytest.raises(UsageError, match="unknown timeout kind"):
        Timeouts().with_overrides({"nap": 1})
    with pytest.raises(UsageError, match="KIND=SECONDS"):
        Timeouts.parse_override("ready")
    assert Timeouts.parse_override("scale=12.5") == ("scale", 12.5)

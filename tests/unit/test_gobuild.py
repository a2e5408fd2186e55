from conformance.build import pins
from conformance.build.gobuild import build_module, carried_replaces, older_candidates

KUBERNETES_GOMOD = """module k8s.io/kubernetes

go 1.25.0

godebug default=go1.25

require (
	k8s.io/api v0.0.0
	github.com/foo/bar v1.2.3
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/client-go => ./staging/src/k8s.io/client-go // the client
)

replace github.com/old/thing => github.com/new/thing v1.0.1
replace go.etcd.io/etcd/api/v3 => ../api
"""


def test_staging_paths_become_tagged_staging_modules() -> None:
    lines = carried_replaces(KUBERNETES_GOMOD, "v0.35.4")
    assert "replace k8s.io/api => k8s.io/api v0.35.4" in lines
    assert "replace k8s.io/client-go => k8s.io/client-go v0.35.4" in lines


def test_versioned_replaces_are_copied_and_sibling_paths_dropped() -> None:
    lines = carried_replaces(KUBERNETES_GOMOD, "v0.35.4")
    assert "replace github.com/old/thing => github.com/new/thing v1.0.1" in lines
    assert not any("etcd" in line for line in lines)
    assert len(lines) == 3


def test_staging_paths_without_a_staging_version_are_dropped() -> None:
    assert carried_replaces(KUBERNETES_GOMOD, "") == [
        "replace github.com/old/thing => github.com/new/thing v1.0.1"
    ]


def test_build_module_requires_the_pin_and_keeps_godebug() -> None:
    tool = pins.TOOLS["kubernetes"]
    text = build_module(tool, ["replace a => b v1"])
    assert f"require k8s.io/kubernetes {pins.KUBERNETES}\n" in text
    assert "godebug default=go1.25\n" in text
    assert text.startswith("module kuberay-conformance.local/build/kubernetes\n")
    assert text.endswith("replace a => b v1\n")


def test_every_kubernetes_binary_is_stamped_with_the_release() -> None:
    tool = pins.TOOLS["kubernetes"]
    flags = " ".join(tool.ldflags)
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {pkg}.gitVersion={pins.KUBERNETES}" in flags
        assert f"-X {pkg}.gitMinor=35" in flags
    assert tool.binaries == (
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kubelet",
        "kube-proxy",
        "kubectl",
    )


def test_module_roots_get_meaningful_binary_names() -> None:
    assert pins.TOOLS["etcd"].binaries == ("etcd",)
    assert pins.TOOLS["kuberay"].binaries == ("kuberay-operator",)
    assert pins.TOOLS["coredns"].binaries == ("coredns",)


def test_fallback_candidates_are_older_releases_newest_first_including_unlisted_ones() -> None:
    candidates = older_candidates("v1.7.0", ["v1.4.0", "v1.5.0", "v1.8.0", "v1.7.0-rc.1"])
    assert candidates[:3] == ["v1.6.5", "v1.6.4", "v1.6.3"]
    assert "v1.6.2" in candidates and "v1.5.0" in candidates and "v1.4.0" in candidates
    assert all(c.startswith(("v1.6.", "v1.5.", "v1.4.")) for c in candidates)
    assert "v1.8.0" not in candidates and "v1.7.0-rc.1" not in candidates


def test_a_second_builder_waits_for_the_first_and_uses_its_result(tmp_path, monkeypatch) -> None:
    """Two processes needing one tool (parallel workers, two test sessions) must not build it twice
    into one partial directory: the second waits on the entry's lock, then finds it built."""
    import threading  # noqa: PLC0415

    from conformance.build import gobuild  # noqa: PLC0415
    from conformance.build.cache import cache_entry_lock  # noqa: PLC0415

    tool = pins.GoTool(
        name="demo", module="example.com/demo", version="v1.0.0", packages=("example.com/demo/cmd/demo",),
        go_directive="1.26",
    )  # fmt: skip

    def no_build(*_args: object) -> str:
        raise AssertionError("the second builder built again instead of using the first one's result")

    monkeypatch.setattr(gobuild, "upstream_gomod", no_build)
    bin_dir = gobuild.cached_bin_dir(tool, tmp_path)
    root = bin_dir.parent
    results: list[object] = []
    with cache_entry_lock(root.with_name(root.name + ".lock")):
        second = threading.Thread(target=lambda: results.append(gobuild.ensure_built(tool, tmp_path)))
        second.start()
        second.join(timeout=1.0)
        assert second.is_alive(), "ensure_built did not wait for the builder holding the lock"
        # The first builder finishes: binaries and the completion record in place.
        bin_dir.mkdir(parents=True)
        (bin_dir / "demo").write_text("")
        (root / "complete").write_text("{}\n")
    second.join(timeout=10.0)
    assert results == [bin_dir]

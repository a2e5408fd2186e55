"""Figures of the local provider, recorded rather than asserted.

Measures, on this machine: the cold build time of each tool (as recorded by the build
that filled the cache), warm `up` time to node Ready, resident memory of the idle
control plane, and the time from pod creation to Running. Writes
benchmarks/results/local_provider.json and the matching table in benchmarks/README.md.

Run as root: `make bench` (it takes the cluster down first if one is up, to time a warm up).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path

from kubernetes import client, config

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conformance.build import gobuild, pins, small_images  # noqa: E402
from conformance.kube.wait import wait_for  # noqa: E402
from conformance.providers.local.provider import LocalProvider  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "local_provider.json"
README = ROOT / "benchmarks" / "README.md"
IDLE_SETTLE_S = 30
POD_SAMPLES = 5


def machine() -> str:
    cores = os.cpu_count()
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cores} cores, {mem_gib:.0f} GiB, {platform.system()} {platform.release()}"


def cold_build_seconds(provider: LocalProvider) -> dict[str, float | None]:
    """Per Go tool (at the version actually built) and per image, as their builds recorded it."""
    figures: dict[str, float | None] = {}
    for name, tool in pins.TOOLS.items():
        built = gobuild.resolve(tool, provider.cache)
        figures[f"{name} {built.version}"] = gobuild.build_seconds(built, provider.cache)
    for marker in sorted((provider.cache / "images").glob("*/complete")):
        record = json.loads(marker.read_text())
        figures[f"image {record['ref'].rsplit('/', 1)[-1]}"] = record.get("build_seconds")
    return figures


def warm_up_seconds(provider: LocalProvider) -> float:
    provider.down()
    provider.ensure_binaries()  # cached: only the bring-up itself is timed
    started = time.monotonic()
    provider.up()
    return time.monotonic() - started


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def idle_control_plane_rss(provider: LocalProvider) -> dict[str, float]:
    time.sleep(IDLE_SETTLE_S)  # a benchmark's settle time, not a test condition
    per_component = {r.name: rss_bytes(r.pid) / 2**20 for r in provider.supervisor.records()}
    tracked = {r.pid for r in provider.supervisor.records()}
    others = sum(rss_bytes(pid) for pid in provider.supervisor.cgroup_pids() if pid not in tracked)
    per_component["(shims and other children)"] = others / 2**20
    return per_component


def pod_start_seconds(provider: LocalProvider) -> list[float]:
    api = config.new_client_from_config(str(provider.state.admin_kubeconfig))
    core = client.CoreV1Api(api)
    kubectl = provider.ensure_binaries().kubernetes / "kubectl"
    archive = small_images.toolbox_image(provider.cache, kubectl)
    provider.load_image(archive)
    namespace = f"krc-bench-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    samples = []
    try:
        for index in range(POD_SAMPLES):
            name = f"p{index}"
            started = time.monotonic()
            core.create_namespaced_pod(
                namespace,
                {
                    "metadata": {"name": name},
                    "spec": {
                        "containers": [
                            {
                                "name": "main",
                                "image": archive.ref,
                                "imagePullPolicy": "Never",
                                "command": ["sleep", "3600"],
                            }
                        ],
                        "terminationGracePeriodSeconds": 0,
                    },
                },
            )
            wait_for(
                core.list_namespaced_pod,
                lambda p: p.status.phase == "Running",
                what=f"pod {name} Running",
                timeout=120,
                namespace=namespace,
                field_selector=f"metadata.name={name}",
            )
            samples.append(time.monotonic() - started)
    finally:
        core.delete_namespace(namespace)
    return samples


def write_readme(result: dict) -> None:
    builds = "\n".join(
        f"| {name} | {secs if secs is not None else 'not recorded'} |"
        for name, secs in result["cold_build_s"].items()
    )
    rss = result["idle_rss_mib"]
    rss_rows = "\n".join(f"| {name} | {mib:.0f} |" for name, mib in sorted(rss.items()))
    pods = result["pod_start_s"]
    pod_range = f"min {min(pods):.2f}, max {max(pods):.2f}"
    section = f"""## Local provider

Measured {result["date"]} on {result["machine"]} by `benchmarks/local_provider.py` (`make bench`).

| figure | value | goal |
|---|---|---|
| warm `cluster up` to node Ready | {result["warm_up_s"]:.1f} s | ≤ 30 s |
| idle control plane resident memory (sum) | {sum(rss.values()):.0f} MiB | ≤ 1536 MiB |
| pod creation to Running (median of {len(pods)}) | {statistics.median(pods):.2f} s ({pod_range}) | |

Cold build time per tool and image (seconds, recorded by the build that filled the cache;
Go module downloads are included; later tools reuse Go's build cache):

| tool or image | seconds |
|---|---|
{builds}

Idle resident memory per component (MiB, after {IDLE_SETTLE_S} s idle):

| component | MiB |
|---|---|
{rss_rows}"""
    replace_section("local-provider", section)


def replace_section(name: str, body: str) -> None:
    """Replace (or append) the README section between this name's markers."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    section = f"{begin}\n{body}\n{end}"
    text = (
        README.read_text()
        if README.exists()
        else "# Benchmarks\n\nFigures recorded by the scripts in this folder.\n"
    )
    if begin in text:
        text = text[: text.index(begin)] + section + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    README.write_text(text)


def main() -> None:
    provider = LocalProvider()
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "cold_build_s": cold_build_seconds(provider),
        "warm_up_s": warm_up_seconds(provider),
    }
    result["idle_rss_mib"] = idle_control_plane_rss(provider)
    result["pod_start_s"] = pod_start_seconds(provider)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    write_readme(result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

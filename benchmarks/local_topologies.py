"""The local provider with one node and with worker nodes: warm `cluster up` time and idle memory.

For each topology (KRC_LOCAL_NODES value): take the cluster down, bring it up from the warm cache
(timed until every node is Ready, GPUs advertised and the StorageClass offered), let it idle, and
sum the resident memory of every process of the cluster (programs, shims, pods). Ends with the
cluster of the last topology up. Writes benchmarks/results/local_topologies.json and the
"local-topologies" section of benchmarks/README.md.

Run as root: `python benchmarks/local_topologies.py [--topology ''] [--topology cpu=1,gpu=1]`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.local_provider import machine, replace_section, rss_bytes, warm_up_seconds  # noqa: E402
from conformance.providers.local import nodes  # noqa: E402
from conformance.providers.local.cleanup import pod_pids  # noqa: E402
from conformance.providers.local.provider import LocalProvider, LocalSettings  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "local_topologies.json"
IDLE_SETTLE_S = 60  # a benchmark's settle time: kubelets' first housekeeping done, not a test condition


def measure(topology: str) -> dict[str, object]:
    provider = LocalProvider(settings=LocalSettings(worker_nodes=nodes.parse(topology)))
    # Its `down` goes by the topology a cluster up now was made with, whatever this one asks.
    up_s = round(warm_up_seconds(provider), 1)
    time.sleep(IDLE_SETTLE_S)
    programs = {r.name: rss_bytes(r.pid) for r in provider.supervisor.records()}
    tracked = {r.pid for r in provider.supervisor.records()}
    children = sum(rss_bytes(p) for p in provider.supervisor.cgroup_pids() if p not in tracked)
    pods = sum(rss_bytes(p) for p in pod_pids())
    total = sum(programs.values()) + children + pods
    return {
        "topology": "one node" if not nodes.parse(topology) else topology,
        "nodes": 1 + len(provider.workers),
        "warm_up_s": up_s,
        "idle_rss_mib": round(total / 2**20),
        "programs_rss_mib": round(sum(programs.values()) / 2**20),
        "shims_rss_mib": round(children / 2**20),
        "pods_rss_mib": round(pods / 2**20),
    }


def render(result: dict) -> str:
    columns = ("topology", "nodes", "warm_up_s", "idle_rss_mib")
    columns += ("programs_rss_mib", "shims_rss_mib", "pods_rss_mib")
    rows = "\n".join("| " + " | ".join(str(r[c]) for c in columns) + " |" for r in result["topologies"])
    return f"""## Local provider topologies (`KRC_LOCAL_NODES`)

Measured {result["date"]} on {result["machine"]} by `benchmarks/local_topologies.py`: warm `cluster up`
(every build cached; until each node is Ready, the GPUs advertised and the StorageClass offered), then
{IDLE_SETTLE_S} s idle and the resident memory of everything the cluster runs. The default profile
makes `cpu=1,gpu=1` (its `local.nodes`); `KRC_LOCAL_NODES=none` makes one node.

| topology | nodes | warm `cluster up` (s) | idle memory (MiB) | of which programs | shims | pods |
|---|---|---|---|---|---|---|
{rows}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", action="append", help="a KRC_LOCAL_NODES value (none: one node)")
    args = parser.parse_args()
    topologies = args.topology if args.topology is not None else ["none", "cpu=1,gpu=1"]
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "topologies": [measure(t) for t in topologies],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    replace_section("local-topologies", render(result))
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

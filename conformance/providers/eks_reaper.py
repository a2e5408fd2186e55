"""The reaper: destroys EKS runs whose deadline has passed, through their remote state.

Every AWS resource infra/terraform/eks makes carries the tags kuberay-conformance/managed-by,
kuberay-conformance/run-id and kuberay-conformance/expires-at (main.tf `local.tags`). A run's own
budget guard destroys it at that deadline, unless the machine running it died: a cancelled or
timed-out CI job, a laptop that went to sleep. The reaper (.github/workflows/eks-reaper.yml, hourly)
finds what is still tagged after the deadline, and the guard's grace, and destroys each run from the
state its Terraform workspace left in the backend (TerraformProvider.down adopts it).

    python -m conformance.providers.eks_reaper expired [--regions R,R] [--most N]
        prints "REGION RUN_ID" per run to destroy, oldest deadline first; what it cannot decide or
        what earlier reapers failed to destroy goes to stderr, one line each, and exits 2.
    python -m conformance.providers.eks_reaper destroy REGION RUN_ID
        destroys that run from remote state (KRC_TF_BACKEND, KRC_TF_BACKEND_CONFIG).

`kuberay-conformance cluster down --provider eks` has no way to name a run; `destroy` is that, until
the CLI takes a run id.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.errors import EXIT_ENVIRONMENT, HarnessError
from conformance.providers import eks_preflight
from conformance.providers.eks import SUPPORTED_REGIONS, EksProvider, require_remote_state
from conformance.providers.eks_preflight import AwsCall, AwsError
from conformance.providers.terraform import RunWorkspace

TAG_MANAGED_BY = "kuberay-conformance/managed-by"
TAG_RUN_ID = "kuberay-conformance/run-id"
TAG_EXPIRES_AT = "kuberay-conformance/expires-at"
MANAGED_BY = "kuberay-conformance"

# After the deadline the run's guard stops the run, gives it 15 minutes to destroy its cluster
# (GUARD_GRACE_S in terraform.py), then destroys it itself, which takes about as long. The reaper
# steps in only after both, so it never races a guard that is still at work.
GRACE_S = 45 * 60
# Still tagged this long after the deadline: earlier reapers could not destroy it (no state in the
# backend, a destroy that keeps failing). Someone must look; the reaper's job fails to say so.
STUCK_AFTER_S = 3 * 3600
# The module's `run_id` validation; anything else in the tag is not a run this harness made.
_RUN_ID = re.compile(r"[A-Za-z0-9][-_.A-Za-z0-9]{0,62}")


@dataclass(frozen=True)
class TaggedRun:
    """The resources of one run in one region, as the tags say."""

    region: str
    run_id: str
    expires_at: float | None  # epoch seconds; None when no resource carries a readable deadline
    resources: int


@dataclass
class Selection:
    destroy: list[TaggedRun] = field(default_factory=list)
    stuck: list[TaggedRun] = field(default_factory=list)  # also in destroy: tried again
    undecidable: list[TaggedRun] = field(default_factory=list)  # never destroyed automatically


def parse_deadline(text: str) -> float | None:
    """The module writes RFC 3339 in UTC (`2026-11-29T21:00:00Z`); anything else is unreadable."""
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()
    except ValueError:
        return None


def runs_from_tags(region: str, mappings: Iterable[dict[str, Any]]) -> list[TaggedRun]:
    """Group `tag get-resources` answers by run id; a run's deadline is the earliest its resources name."""
    found: dict[str, list[float | None]] = {}
    for mapping in mappings:
        tags = {tag["Key"]: tag["Value"] for tag in mapping.get("Tags", [])}
        if tags.get(TAG_MANAGED_BY) != MANAGED_BY:
            continue
        found.setdefault(tags.get(TAG_RUN_ID, ""), []).append(parse_deadline(tags.get(TAG_EXPIRES_AT, "")))
    runs = []
    for run_id, deadlines in sorted(found.items()):
        readable = [d for d in deadlines if d is not None]
        runs.append(TaggedRun(region, run_id, min(readable) if readable else None, len(deadlines)))
    return runs


def select(
    runs: Iterable[TaggedRun], now: float, grace_s: float = GRACE_S, stuck_after_s: float = STUCK_AFTER_S
) -> Selection:
    """Which runs are past their deadline and the guard's grace (oldest first), which of those have
    outlived earlier reapers, and which carry no run id or deadline the reaper can act on."""
    chosen = Selection()
    for run in sorted(runs, key=lambda r: (r.expires_at or 0.0, r.region, r.run_id)):
        if run.expires_at is None or not _RUN_ID.fullmatch(run.run_id):
            chosen.undecidable.append(run)
        elif now >= run.expires_at + grace_s:
            chosen.destroy.append(run)
            if now >= run.expires_at + stuck_after_s:
                chosen.stuck.append(run)
    return chosen


def tagged_resources(aws: AwsCall) -> list[dict[str, Any]]:
    """Every resource of this region tagged as the harness's (the CLI follows the pages itself)."""
    answer = aws(
        [
            "resourcegroupstaggingapi",
            "get-resources",
            "--tag-filters",
            f"Key={TAG_MANAGED_BY},Values={MANAGED_BY}",
        ]
    )
    return list(answer.get("ResourceTagMappingList", []))


def _describe(run: TaggedRun) -> str:
    deadline = "no readable deadline" if run.expires_at is None else f"deadline {_rfc3339(run.expires_at)}"
    return (
        f"run {run.run_id or '(no run id)'} in {run.region}: {run.resources} tagged resource(s), {deadline}"
    )


def _rfc3339(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def expired(regions: Sequence[str], most: int, now: float) -> int:
    runs: list[TaggedRun] = []
    failed = False
    for region in regions:
        try:
            runs += runs_from_tags(region, tagged_resources(eks_preflight.run_aws(region)))
        except AwsError as exc:
            print(f"eks-reaper: {region}: {exc.one_line()}", file=sys.stderr)
            failed = True
    chosen = select(runs, now)
    for run in chosen.destroy[:most]:
        print(f"{run.region} {run.run_id}")
    for run in chosen.destroy[most:]:
        print(f"eks-reaper: left for the next round: {_describe(run)}", file=sys.stderr)
    for run in chosen.stuck:
        print(
            f"eks-reaper: still there {STUCK_AFTER_S // 3600} h after its deadline: {_describe(run)}",
            file=sys.stderr,
        )
    for run in chosen.undecidable:
        print(f"eks-reaper: not destroyed, delete by hand if it is a leak: {_describe(run)}", file=sys.stderr)
    return EXIT_ENVIRONMENT if failed or chosen.stuck or chosen.undecidable else 0


def destroy(region: str, run_id: str) -> int:
    if region not in SUPPORTED_REGIONS or not _RUN_ID.fullmatch(run_id):
        print(f"eks-reaper: no run {run_id!r} in a supported region {region!r}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    os.environ["KRC_EKS_REGION"] = region
    try:
        require_remote_state()  # without it there is nothing to destroy from
        problems = EksProvider(run_id=run_id).down()
    except HarnessError as exc:
        print(f"eks-reaper: {run_id}: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    for problem in problems:
        print(f"eks-reaper: {run_id}: not destroyed: {problem}", file=sys.stderr)
    if RunWorkspace.for_run("eks", run_id).state == "absent":
        # Tagged resources, no state: flagged as stuck by `expired` if they are still there later.
        print(
            f"eks-reaper: {run_id}: the backend holds no workspace of this run; nothing destroyed",
            file=sys.stderr,
        )
    return EXIT_ENVIRONMENT if problems else 0


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.providers.eks_reaper")
    commands = parser.add_subparsers(dest="command", required=True)
    find = commands.add_parser("expired", help="print REGION RUN_ID of each run past its deadline")
    find.add_argument("--regions", default=",".join(SUPPORTED_REGIONS), help="comma-separated")
    find.add_argument("--most", type=int, default=3, help="at most this many (the rest next round)")
    kill = commands.add_parser("destroy", help="destroy one run from remote state")
    kill.add_argument("region")
    kill.add_argument("run_id")
    args = parser.parse_args(argv)
    if args.command == "expired":
        regions = [r for r in args.regions.split(",") if r] or list(SUPPORTED_REGIONS)
        return expired(regions, args.most, datetime.datetime.now(datetime.UTC).timestamp())
    return destroy(args.region, args.run_id)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

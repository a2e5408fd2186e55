"""The operator's command line and state read back, as the operator itself reads them (pure):
Go's flag parsing (`parse_operator_args`), feature gates, the version in an image tag, the
versions a CRD serves, and whether a leader-election lease is held.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from conformance.install.operator_spec import BINARY_FEATURE_GATES

# The operator's boolean flags: Go's flag package never takes their value from the next argument.
_BOOL_FLAGS = frozenset(
    {
        "enable-leader-election",
        "forced-cluster-upgrade",
        "enable-batch-scheduler",
        "use-kubernetes-proxy",
        "enable-metrics",
        "zap-devel",
    }
)
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_TAG_VERSION = re.compile(r"v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)")


@dataclass(frozen=True)
class OperatorArgs:
    """The operator's command line as Go's flag package would read it."""

    flags: dict[str, str] = field(hash=False)
    feature_gates: dict[str, bool] = field(hash=False)  # only those named on the command line
    leader_election: bool  # main.go's default (true) when the flag is absent
    watch_namespaces: tuple[str, ...]  # empty: every namespace
    leader_election_namespace: str  # empty: the operator's own namespace
    config_file: str  # with --config, flags are ignored and a ConfigMap holds the settings


def parse_go_bool(text: str) -> bool:
    """strconv.ParseBool, which is what both `flag` and the feature-gate parser use."""
    if text in _GO_TRUE:
        return True
    if text in _GO_FALSE:
        return False
    raise ValueError(f"not a Go boolean: {text!r}")


def parse_feature_gates(value: str) -> dict[str, bool]:
    """`A=true, B=false` -> {"A": True, "B": False}, as featuregate.Set reads it."""
    gates: dict[str, bool] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        name, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"feature gate {item!r} has no value")
        gates[name.strip()] = parse_go_bool(raw.strip())
    return gates


def parse_flags(argv: Sequence[str]) -> dict[str, str]:
    """Go `flag` parsing: -x or --x, `=value` or the next argument; stops at `--` or a non-flag."""
    flags: dict[str, str] = {}
    index = 0
    while index < len(argv):
        token = argv[index]
        if token == "--" or not token.startswith("-") or token == "-":
            break
        name, sep, value = token.lstrip("-").partition("=")
        if not sep:
            if name in _BOOL_FLAGS:
                value = "true"
            elif index + 1 < len(argv):
                index += 1
                value = argv[index]
        flags[name] = value
        index += 1
    return flags


def parse_operator_args(argv: Sequence[str]) -> OperatorArgs:
    flags = parse_flags(argv)
    watch = tuple(ns for ns in flags.get("watch-namespace", "").split(",") if ns)
    return OperatorArgs(
        flags=flags,
        feature_gates=parse_feature_gates(flags.get("feature-gates", "")),
        leader_election=parse_go_bool(flags.get("enable-leader-election", "true")),
        watch_namespaces=watch,
        leader_election_namespace=flags.get("leader-election-namespace", ""),
        config_file=flags.get("config", ""),
    )


def effective_feature_gates(version: str, explicit: Mapping[str, bool]) -> dict[str, bool]:
    """What the binary runs with: its own defaults (when we know the version) overlaid by the args."""
    return {**BINARY_FEATURE_GATES.get(version, {}), **explicit}


def version_from_image(image: str) -> str:
    """`quay.io/kuberay/operator:v1.7.0` -> `v1.7.0`; "" when the tag is no version (or absent).

    An image built from a checkout is tagged `<version>-src.<tree hash>` (kuberay_source.image_tag):
    its version is the checkout's.
    """
    reference = image.split("@", 1)[0]
    last = reference.rsplit("/", 1)[-1]
    _, sep, tag = last.partition(":")
    match = _TAG_VERSION.fullmatch(re.sub(r"-src\.[0-9a-f]+$", "", tag)) if sep else None
    return f"v{match.group(1)}" if match else ""


def served_versions(crd: Mapping[str, Any]) -> tuple[str, ...]:
    """The versions a CRD serves, in its own order."""
    return tuple(v["name"] for v in crd.get("spec", {}).get("versions", []) if v.get("served"))


def holder_pod(identity: str) -> str:
    """The pod in a controller-runtime leader identity, `<hostname>_<uuid>` (a pod's hostname is its name)."""
    return identity.split("_", 1)[0]


def lease_is_held(holder: str, renew_time: datetime | None, duration_s: int | None, now: datetime) -> bool:
    """A lease is held while it has a holder and its last renewal is younger than its duration."""
    if not holder or renew_time is None or not duration_s:
        return False
    return (now - renew_time).total_seconds() < duration_s

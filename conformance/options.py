"""The run options, declared once: `kuberay-conformance run`'s flags and their `--conformance-*`
twins under plain pytest come from the one table below, and their values become the run's
`RunOptions` in one place.

`kuberay-conformance run --area gpu` and `pytest --conformance-area gpu` read the same entry; the
CLI's help is the longer text, pytest's the short one. The values travel as `RunValues` (plain
strings, tuples and flags) until `RunValues.run_options` loads the profile and checks the run
folder; that happens once per run, in the process that starts it (session/setup.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest

from conformance import parallel, profiles, selection
from conformance.environment import RunOptions, check_run_dir
from conformance.errors import UsageError
from conformance.providers import PROVIDERS
from conformance.report.summary import AREAS, new_run_id
from conformance.timeouts import Timeouts

PYTEST_GROUP = "kuberay-conformance"
PYTEST_PREFIX = "--conformance-"


class ShardSpec(click.ParamType):
    """K/N: shard K of N, 1 <= K <= N (selection.py)."""

    name = "K/N"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return str(selection.parse_shard(str(value)))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@dataclass(frozen=True)
class Option:
    """One run option: `--<flag>` for the CLI, `--conformance-<flag>` for pytest, `field` in RunValues."""

    field: str
    flag: str | None  # the CLI's; None: pytest only (set by the CLI through RunValues)
    help: str  # the CLI's
    pytest_help: str
    default: Any = None  # pytest's (None, [] for `multiple`), and the CLI's unless `cli_default`
    multiple: bool = False
    is_flag: bool = False
    metavar: str | None = None
    cli_type: Any = None
    cli_default: Any = None
    show_default: bool = False
    pytest_flag: str | None = None  # when it is not --conformance-<flag>

    @property
    def pytest_name(self) -> str:
        return self.pytest_flag or f"{PYTEST_PREFIX}{self.flag}"


OPTIONS: tuple[Option, ...] = (
    Option(
        "provider",
        "provider",
        "Which provider makes or reaches the cluster.",
        "run conformance checks on this provider",
        cli_type=click.Choice(PROVIDERS),
        cli_default="local",
        show_default=True,
    ),
    Option(
        "profile",
        "profile",
        "Profile name or path to a profile YAML.",
        "profile name or YAML path",
        default="default",
        show_default=True,
    ),
    Option("kubeconfig", "kubeconfig", "Kubeconfig (provider `existing`).", "kubeconfig (provider existing)"),
    Option(
        "context",
        "context",
        "Kubeconfig context (provider `existing`).",
        "kubeconfig context (provider existing)",
    ),
    Option(
        "ray_versions",
        "ray-version",
        "Ray version(s) to test (default: the profile's).",
        "Ray version(s) to test",
        multiple=True,
    ),
    Option(
        "run_dir",
        "run-dir",
        "Where results go (default: reports/<run-id>); its name is the run id, which labels the "
        "run's namespaces (at most 63 letters, digits, '-', '_', '.').",
        "where results go (default reports/<run-id>)",
    ),
    Option(
        "keep_failed",
        "keep-failed",
        "Keep the namespaces of failed checks for inspection.",
        "keep namespaces of failed checks",
        is_flag=True,
    ),
    Option(
        "keep_cluster",
        "keep-cluster",
        "Leave the cluster running after the run.",
        "leave the cluster running",
        is_flag=True,
    ),
    Option(
        "areas",
        "area",
        "Run only these areas.",
        "run only these areas",
        multiple=True,
        cli_type=click.Choice(AREAS),
    ),
    Option(
        "tier",
        "tier",
        "full: every check; smoke: a few per area, the checks marked smoke (minutes, not hours).",
        "full (every check) or smoke (the checks marked smoke)",
        default=selection.DEFAULT_TIER,
        cli_type=click.Choice(selection.TIERS),
        show_default=True,
    ),
    Option(
        "shard",
        "shard",
        "Only shard K of N of the selected checks (after --area, -k, --tier), balanced by recorded "
        "durations; N runs of K=1..N make every check once (`report merge` joins their reports).",
        "run only shard K of N",
        metavar="K/N",
        cli_type=ShardSpec(),
    ),
    Option(
        "kuberay_source",
        "kuberay-source",
        "Test KubeRay built from this checkout of ray-project/kuberay (any tag, branch or commit; "
        ".git optional), installed with its own helm-chart/kuberay-operator, or with kustomize from "
        "ray-operator/config/default where it has no chart. Local provider.",
        "build KubeRay from this checkout and install it with its own chart (or kustomize)",
        metavar="DIR",
    ),
    Option(
        "kuberay_version",
        "kuberay-version",
        "The version of the --kuberay-source checkout, where its files do not say it (vX.Y.Z).",
        "the version of the --conformance-kuberay-source checkout, where its files do not say it",
    ),
    Option(
        "wait_for_lock",
        "wait-for-lock",
        "If another run holds the cluster, wait for it to end instead of refusing (exit 2).",
        "wait for another run's hold on the cluster to end, instead of refusing",
        is_flag=True,
    ),
    Option(
        "recount_workers",
        None,
        "",
        "count the workers (--workers auto) once the controller has made the cluster",
        is_flag=True,
        pytest_flag=parallel.RECOUNT_OPTION,
    ),
    Option(
        "timeout_overrides",
        "timeout",
        "Override a timeout kind: apply, ready, scale, cleanup, upgrade, check (the hard cap per check).",
        "override a timeout kind (apply, ready, scale, cleanup, upgrade, check)",
        multiple=True,
        metavar="KIND=SECONDS",
    ),
)
BY_FIELD = {option.field: option for option in OPTIONS}


def add_to_pytest(parser: pytest.Parser) -> None:
    """The `--conformance-*` options of plain pytest (the plugin's pytest_addoption)."""
    group = parser.getgroup(PYTEST_GROUP)
    for option in OPTIONS:
        kwargs: dict[str, Any] = {"help": option.pytest_help}
        if option.is_flag:
            kwargs["action"] = "store_true"
        elif option.multiple:
            kwargs.update(action="append", default=[])
        else:
            kwargs["default"] = option.default
        if option.metavar:
            kwargs["metavar"] = option.metavar
        group.addoption(option.pytest_name, **kwargs)


def cli(field: str, **changes: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The click option of a run option (`changes`: what one command says differently, e.g. help)."""
    option = BY_FIELD[field]
    assert option.flag is not None, f"{field} is not a CLI option"
    kwargs: dict[str, Any] = {"help": option.help}
    if option.is_flag:
        kwargs["is_flag"] = True
    else:
        kwargs["default"] = option.cli_default if option.cli_default is not None else option.default
    if option.multiple:
        kwargs["multiple"] = True
    for key, value in (("type", option.cli_type), ("metavar", option.metavar)):
        if value is not None:
            kwargs[key] = value
    if option.show_default:
        kwargs["show_default"] = True
    kwargs.update(changes)
    return click.option(f"--{option.flag}", option.field, **kwargs)


@dataclass(frozen=True)
class RunValues:
    """The options' values as given (the CLI's parameters, or pytest's `--conformance-*`)."""

    provider: str | None = None
    profile: str = "default"
    kubeconfig: str | None = None
    context: str | None = None
    ray_versions: tuple[str, ...] = ()
    run_dir: str | None = None
    keep_failed: bool = False
    keep_cluster: bool = False
    areas: tuple[str, ...] = ()
    tier: str = selection.DEFAULT_TIER
    shard: str | None = None
    kuberay_source: str | None = None
    kuberay_version: str | None = None
    wait_for_lock: bool = False
    recount_workers: bool = False
    timeout_overrides: tuple[str, ...] = ()

    @classmethod
    def from_pytest(cls, config: pytest.Config) -> RunValues:
        values: dict[str, Any] = {}
        for option in OPTIONS:
            value = config.getoption(option.pytest_name)
            if option.multiple:
                value = tuple(value)
            values[option.field] = bool(value) if option.is_flag else value
        return cls(**values)

    def run_options(self) -> RunOptions:
        """The profile loaded, the timeout overrides parsed and checked, the run folder chosen and
        checked (creating nothing): a bad value is a UsageError here, before anything is made."""
        assert self.provider is not None
        run_dir = Path(self.run_dir) if self.run_dir else Path("reports") / new_run_id()
        loaded = profiles.load(self.profile)
        overrides = dict(Timeouts.parse_override(t) for t in self.timeout_overrides)
        options = RunOptions(
            provider=self.provider,
            profile=loaded,
            run_dir=run_dir.resolve(),
            run_id=run_dir.name,
            kubeconfig=self.kubeconfig,
            context=self.context,
            ray_versions=self.ray_versions,
            keep_failed=self.keep_failed,
            keep_cluster=self.keep_cluster,
            timeout_overrides=overrides,
            kuberay_source=self.kuberay_source,
            kuberay_version=self.kuberay_version,
        )
        options.timeouts  # noqa: B018 - validates the overrides now, before anything runs
        check_run_dir(options.run_dir)
        return options

    def asked_selection(self, keyword: str | None) -> dict[str, object]:
        """The selection as asked (summary.json's `selection`); the counts come once collected."""
        if self.tier not in selection.TIERS:
            raise UsageError(f"--tier {self.tier!r} is not one of {', '.join(selection.TIERS)}")
        try:
            parsed = selection.parse_shard(self.shard) if self.shard else None
        except ValueError as exc:
            raise UsageError(f"--shard {exc}", "give K/N with 1 <= K <= N, e.g. --shard 2/4") from None
        return {
            "tier": self.tier,
            "areas": sorted(self.areas),
            "keyword": keyword or None,
            "shard": str(parsed) if parsed else None,
        }

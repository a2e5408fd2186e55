"""`kuberay-conformance`: bring clusters up and down, run the conformance suites, rebuild reports.

Exit codes: 0 conformant (or the command succeeded), 1 conformance failures,
2 harness or environment errors, 3 usage errors.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click
import pytest

from conformance import capacity, cluster_lock, interrupts, options, parallel, profiles, suite_session
from conformance.environment import Environment
from conformance.errors import EXIT_ENVIRONMENT, EXIT_USAGE, HarnessError, UsageError
from conformance.kube.target import api_client
from conformance.providers import get_provider
from conformance.providers.base import NodeFaults
from conformance.report import summary
from conformance.report.summary import now
from conformance.session.setup import RunSetup

if TYPE_CHECKING:
    from conformance.report.build import Built


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"kuberay-conformance: error: {message}", err=True)
    sys.exit(code)


def guarded(action: Callable[[], int | None]) -> None:
    """Run a command, turning every exception into a one-line message and the contract's exit code:
    harness errors their own (2 or 3), interrupts 2, and anything unexpected 2 with the traceback
    in a file (a bug of the harness is never exit 1, which means "not conformant")."""
    interrupts.install()
    try:
        code = action()
    except HarnessError as exc:
        _fail(exc.one_line(), exc.exit_code)
    except (KeyboardInterrupt, interrupts.Interrupted) as exc:
        _fail(f"interrupted ({exc or 'SIGINT'}); what this command created was cleaned up", EXIT_ENVIRONMENT)
    except click.ClickException:
        raise  # usage errors of click's own, exit 3 in run()
    except Exception as exc:  # noqa: BLE001 - the outermost layer: the contract holds for every exception
        _unexpected(exc)
    sys.exit(code or 0)


def _unexpected(exc: BaseException) -> NoReturn:
    """Exit 2 with the cause in one line and the whole traceback in a file."""
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    written = _write_traceback(exc)
    _fail(
        f"internal error: {type(exc).__name__}: {first} (a harness bug or an environment problem; "
        f"traceback in {written})",
        EXIT_ENVIRONMENT,
    )


def _write_traceback(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc))
    try:
        handle, name = tempfile.mkstemp(prefix="kuberay-conformance-", suffix=".traceback")
        with os.fdopen(handle, "w") as out:
            out.write(text)
    except OSError:
        sys.stderr.write(text)
        return "the lines above"
    return name


provider_option = options.cli("provider")
kubeconfig_option = options.cli("kubeconfig")
context_option = options.cli("context")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Conformance harness for KubeRay: does this KubeRay + Ray + Kubernetes do what the docs promise?"""


@main.group()
def cluster() -> None:
    """Bring the cluster under test up or down, or look at it."""


@cluster.command("up")
@provider_option
@click.option(
    "--profile",
    default="default",
    show_default=True,
    help="Profile name or path: its local.nodes are the local cluster's worker nodes.",
)
@kubeconfig_option
@context_option
def cluster_up(provider: str, profile: str, kubeconfig: str | None, context: str | None) -> None:
    """Create the cluster, or reuse a healthy one and repair dead components (idempotent)."""

    def action() -> int:
        nodes = profiles.load(profile).local_nodes  # a bad profile is refused before anything is made
        made = get_provider(provider, kubeconfig=kubeconfig, context=context, local_nodes=nodes).up()
        click.echo(f"cluster is up ({made.provider}); kubeconfig: {made.kubeconfig}")
        click.echo(f'use it from a shell: eval "$(kuberay-conformance cluster env --provider {provider})"')
        return 0

    guarded(action)


@cluster.command("down")
@provider_option
def cluster_down(provider: str) -> None:
    """Stop every process `up` started and undo every host change it made."""

    def action() -> int:
        problems = get_provider(provider).down()
        for problem in problems:
            click.echo(f"not cleaned up: {problem}", err=True)
        if problems:
            return EXIT_ENVIRONMENT
        click.echo("cluster is down; nothing of it is left running")
        return 0

    guarded(action)


@cluster.command("status")
@provider_option
@kubeconfig_option
@context_option
def cluster_status(provider: str, kubeconfig: str | None, context: str | None) -> None:
    """Report each component and the node; exits 2 when something is unhealthy."""

    def action() -> int:
        status = get_provider(provider, kubeconfig=kubeconfig, context=context).status()
        if not status.exists:
            click.echo(f"{status.provider}: {status.summary or 'no cluster'}")
            return EXIT_ENVIRONMENT
        width = max(len(c.name) for c in status.components)
        for component in status.components:
            mark = "ok  " if component.healthy else "FAIL"
            click.echo(f"{mark} {component.name:<{width}}  {component.detail}")
        return 0 if status.healthy else EXIT_ENVIRONMENT

    guarded(action)


NODE_ACTIONS = {
    "stop": "stopped, as a lost machine (its kubelet, runtime and pod processes)",
    "start": "started again and Ready",
    "cut": "cut off the network, its processes left running",
    "heal": "joined to the network again",
}


@cluster.command("node")
@click.argument("action", type=click.Choice(list(NODE_ACTIONS)))
@click.argument("name")
@provider_option
def cluster_node(action: str, name: str, provider: str) -> None:
    """Take a worker node away or give it back by hand, as the node-fault checks do: stop (a lost
    machine), start (back, once Ready), cut (network off, processes alive), heal. Refused while a
    run holds the cluster, whose verdict it would spoil."""

    def run_action() -> int:
        faults = _node_faults(provider)
        if action in ("stop", "start"):
            (faults.stop_node if action == "stop" else faults.start_node)(name)
        else:
            faults.isolate_node(name, cut=action == "cut")
        click.echo(f"node {name} {NODE_ACTIONS[action]}")
        return 0

    guarded(run_action)


def _node_faults(provider: str) -> NodeFaults:
    """The provider's node faults, for a cluster that is up and that no run holds."""
    made = get_provider(provider)
    if not isinstance(made, NodeFaults):
        raise UsageError(f"provider {provider} cannot take a node away", "use the local provider")
    cluster = made.cluster()
    if not cluster.kubeconfig.exists():
        raise UsageError(f"no {provider} cluster is up", "run `kuberay-conformance cluster up` first")
    holder = cluster_lock.live_holder(api_client(cluster.target))
    if holder:
        raise cluster_lock.LockHeld(
            f"{holder.describe()} holds the cluster, whose verdict a node fault would spoil",
            "wait until it ends, then try again",
        )
    return made


@cluster.command("env")
@provider_option
@kubeconfig_option
@context_option
def cluster_env(provider: str, kubeconfig: str | None, context: str | None) -> None:
    """Print the exports a shell needs: eval "$(kuberay-conformance cluster env)".

    With --context: HELM_KUBECONTEXT for helm, and an alias that gives kubectl the same context
    (kubectl reads no context variable)."""

    def action() -> int:
        env = get_provider(provider, kubeconfig=kubeconfig, context=context).env()
        for key, value in env.items():
            click.echo(f"export {key}={shlex.quote(value)}")
        if "HELM_KUBECONTEXT" in env:
            click.echo(
                f"alias kubectl={shlex.quote('kubectl --context ' + shlex.quote(env['HELM_KUBECONTEXT']))}"
            )
        return 0

    guarded(action)


class WorkerCount(click.ParamType):
    """`auto` or a whole number of at least 1."""

    name = "N|auto"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if text == "auto" or (text.isdigit() and int(text) >= 1):
            return text
        self.fail(f"{text!r} is neither auto nor a whole number of at least 1", param, ctx)


# Declared once for `run` and `list`, so both select the same checks from the same words.
tier_option = options.cli("tier")
shard_option = options.cli("shard")


def _worker_count(requested: str, environment: Environment, api: object | None) -> int | None:
    """The number of pytest-xdist workers; `auto` asks what the cluster can hold (capacity.py).

    None: the cluster is not made yet (kind, eks), so the run counts once it is up (plugin.py)."""
    if requested != "auto":
        return int(requested)
    provider, profile = environment.options.provider, environment.options.profile
    if api is not None:
        room = capacity.room_for(provider, api)  # type: ignore[arg-type]
    elif provider == "local":
        room = capacity.room_on_this_machine()
    else:
        click.echo("workers: counted once the cluster is up (auto)", err=True)
        return None
    count = capacity.workers_for(room, profile)
    click.echo(capacity.describe(room, count, profile), err=True)
    return count


@main.command("run")
@provider_option
@options.cli("profile")
@kubeconfig_option
@context_option
@options.cli("ray_versions")
@options.cli("areas")
@click.option("-k", "keyword", default=None, help="Only checks matching this pytest -k expression.")
@tier_option
@shard_option
@options.cli("timeout_overrides")
@options.cli("keep_failed")
@options.cli("keep_cluster")
@options.cli("run_dir")
@options.cli("kuberay_source")
@options.cli("kuberay_version")
@click.option(
    "--workers",
    type=WorkerCount(),
    default="auto",
    show_default=True,
    help="Checks run at once (pytest-xdist workers). auto: one per core of the cluster's nodes, within "
    "their free memory for a head and two workers each, at least 1. Exclusive checks always run alone.",
)
@options.cli("wait_for_lock")
def run_command(keyword: str | None, workers: str, **given: Any) -> None:
    """Run the conformance suites and write reports/<run-id>/ (summary.json, junit.xml, allure-results/)."""

    def action() -> int:
        # Built once: the profile loaded, the run folder chosen, the input checked (bad input is
        # refused here, before anything is provisioned); pytest's session gets this very run.
        setup = RunSetup.build(options.RunValues(**given), keyword)
        setup.environment.check_input()
        target = setup.options.run_dir
        # One run per cluster: the lock is taken before anything changes. A cluster that does not
        # answer yet has no holder; the session takes the lock as soon as it does.
        api = setup.environment.reachable_api()
        if api is not None:
            setup.claim(api, now())
        try:
            args = [*suite_session.args(), "-ra", "--junitxml", str(target / "junit.xml")]
            args += ["--alluredir", str(target / "allure-results"), *(["-k", keyword] if keyword else [])]
            count = _worker_count(workers, setup.environment, api)
            if count is None:  # one worker for now; the controller adds the rest once it can count
                args += ["-n", "1", *parallel.DISTRIBUTION]
                setup.recount_workers = True
            elif count > 1:
                args += ["-n", str(count), *parallel.DISTRIBUTION]
            code = pytest.main(args, plugins=[setup])
        finally:
            setup.release_lock()
        if code == pytest.ExitCode.USAGE_ERROR:
            return EXIT_USAGE
        summary_path = target / "summary.json"
        if not summary_path.exists():
            click.echo(f"no summary was written (pytest exit {int(code)})", err=True)
            return EXIT_ENVIRONMENT
        result = summary.load(summary_path)
        click.echo(f"verdict: {result.verdict()}; report: {(target / 'index.html').resolve()}")
        return result.exit_code()

    guarded(action)


@main.command("list")
@options.cli("profile", help="Profile name or path (its Ray versions).")
@options.cli("areas", help="Only these areas.")
@options.cli("ray_versions", help="Ray version(s) (default: the profile's).")
@click.option("-k", "keyword", default=None, help="Only checks matching this pytest -k expression.")
@tier_option
@shard_option
@click.option("--catches", is_flag=True, help="Also print, under each check, the misbehaviour it catches.")
@options.cli(
    "kuberay_source",
    help="A KubeRay checkout: the samples area lists its samples (default: the profile's version's).",
)
def list_command(
    profile: str,
    areas: tuple[str, ...],
    ray_versions: tuple[str, ...],
    keyword: str | None,
    tier: str,
    shard: str | None,
    catches: bool,
    kuberay_source: str | None,
) -> None:
    """Print the checks with their areas, preconditions (requires), kuberay issues and markers
    (with --catches, what KubeRay misbehaviour each exists to catch).

    Touches no cluster and writes nothing (a pytest --collect-only of the suites)."""

    def action() -> int:
        from conformance import listing  # noqa: PLC0415 - only this command needs it

        values = options.RunValues(
            provider="local",
            profile=profile,
            areas=areas,
            ray_versions=ray_versions,
            kuberay_source=kuberay_source,
            tier=tier,
            shard=shard,
        )
        setup = RunSetup.build(values, keyword)  # a bad profile is a one-line usage error, as for run
        setup.options.profile.check_ray_versions(ray_versions)
        found = listing.collect_run(setup, keyword)
        for line in listing.lines(found, catches):
            click.echo(line)
        return 0

    guarded(action)


@main.group("profile")
def profile_group() -> None:
    """Validate profiles and print their JSON Schema (for editors and CI)."""


@profile_group.command("check")
@click.argument("file")
def profile_check(file: str) -> None:
    """Validate a profile (a path or a bundled name): exit 0 valid, 3 with every problem listed."""

    def action() -> int:
        loaded = profiles.load(file)
        click.echo(f"profile {loaded.source} is valid ({loaded.name})")
        return 0

    guarded(action)


@profile_group.command("schema")
def profile_schema() -> None:
    """Print the profiles' JSON Schema (the file conformance/profiles/profile.schema.json)."""
    from conformance.profiles import schema  # noqa: PLC0415

    click.echo(schema.json_schema(), nl=False)


class _ReportGroup(click.Group):
    """`report RUN_DIR` rebuilds a run's reports; `report merge ...` merges shards. Anything that is
    not a subcommand's name goes to the rebuild, so `report RUN_DIR` reads as it always did."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = [REBUILD, *args]
        return super().parse_args(ctx, args)


REBUILD = "rebuild"


@main.group("report", cls=_ReportGroup)
def report_group() -> None:
    """Rebuild a run's reports: `report RUN_DIR [--history X] [--no-allure]` (its options:
    `report rebuild --help`); or merge the reports of a run's shards: `report merge DIR... --out DIR`."""


@report_group.command(REBUILD, hidden=True)
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--history",
    "history",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="Earlier runs: a folder of runs, a run folder or an Allure history.jsonl (repeatable). "
    "Runs beside RUN_DIR are always read.",
)
@click.option("--no-allure", is_flag=True, help="Skip the Allure single-file report.")
def report_command(run_dir: Path, history: tuple[Path, ...], no_allure: bool) -> None:
    """Rebuild RUN_DIR's reports (index.html, allure-report/) from its results; exits with its verdict."""

    def action() -> int:
        from conformance.report import build  # noqa: PLC0415 - only this command needs it

        if not run_dir.is_dir():
            raise UsageError(f"{run_dir} is not a folder", "give the folder of a run, e.g. reports/latest")
        return _shown(build.build(run_dir, history_sources=history, with_allure=not no_allure))

    guarded(action)


@report_group.command("merge")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    required=True,
    type=click.Path(path_type=Path),
    help="Where the merged report goes: a new or empty folder (its name is the merged run's id).",
)
@click.option("--no-allure", is_flag=True, help="Skip the Allure single-file report.")
def report_merge(run_dirs: tuple[Path, ...], out: Path, no_allure: bool) -> None:
    """Merge the reports of a run's shards (`run --shard K/N`, K = 1..N) into one: summary.json,
    junit.xml, allure-results/ and index.html of the checks together; exits with their verdict.

    Refused (exit 3, nothing written) unless the runs are every shard of one selection on one
    provider, profile and KubeRay, each given once, none merged already, and --out is new or empty."""

    def action() -> int:
        from conformance.report import merge  # noqa: PLC0415 - only this command needs it

        built = merge.merge(list(run_dirs), out, with_allure=not no_allure)
        shards = built.summary.merged.get("shards")
        click.echo(f"merged {shards} shards into {out}")
        return _shown(built)

    guarded(action)


def _shown(built: Built) -> int:
    """The one-screen summary of built reports and their warnings; the verdict's exit code."""
    from conformance.report import terminal  # noqa: PLC0415

    for line in terminal.lines(built):
        click.echo(line)
    for problem in built.problems:
        click.echo(f"warning: {problem}", err=True)
    return built.summary.exit_code()


def run() -> None:
    """Console-script entry point: click's own usage errors exit 3, like ours."""
    try:
        main.main(standalone_mode=False)
    except click.UsageError as exc:
        _fail(exc.format_message(), EXIT_USAGE)
    except click.Abort:
        _fail("interrupted", EXIT_ENVIRONMENT)
    except click.ClickException as exc:  # e.g. a file argument that cannot be opened
        _fail(exc.format_message(), EXIT_USAGE)
    except Exception as exc:  # noqa: BLE001 - outside any command (option parsing, imports)
        _unexpected(exc)


if __name__ == "__main__":
    run()

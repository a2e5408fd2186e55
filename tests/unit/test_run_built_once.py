"""A run's options become a run once per process: `kuberay-conformance run` loads the profile,
makes the Environment, checks the input and takes the lock, and hands that very run to pytest
(`pytest.main(args, plugins=[setup])`), which neither parses `--conformance-*` strings back nor
loads, makes or checks anything again. Workers of a parallel run get the options from the
controller, not from the command line.

No cluster: the existing provider's reachability check and the environment's preparation are
stand-ins (preparation fails, as it does on a cluster that is away); the checks of the small
suite use no cluster, so they pass, and summary.json shows the session ran them.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from conformance import cli, options, profiles, suite_session
from conformance.environment import Environment
from conformance.errors import ProvisioningError
from conformance.providers.base import Cluster
from conformance.providers.existing import ExistingProvider
from conformance.session.setup import RunSetup

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: nowhere, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: nowhere, user: u}}]
current-context: c
"""

SUITE = """
import pytest

pytestmark = pytest.mark.area("raycluster")


@pytest.mark.parametrize("n", range(3))
def test_needs_no_cluster(n):
    assert n >= 0
"""


class Counts:
    def __init__(self) -> None:
        self.profiles: list[str] = []
        self.environments: list[Environment] = []
        self.input_checks = 0
        self.prepared: list[Environment] = []
        self.sessions: list[tuple[list[str], list[object]]] = []


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Counts:
    counted = Counts()
    load, make, check_kuberay = profiles.load, Environment.__init__, Environment._check_kuberay

    def counting_load(name: str) -> profiles.Profile:
        counted.profiles.append(name)
        return load(name)

    def counting_make(self: Environment, run_options: object) -> None:
        counted.environments.append(self)
        make(self, run_options)  # type: ignore[arg-type]

    def counting_check_kuberay(self: Environment) -> None:  # one call per run of check_input's body
        counted.input_checks += 1
        check_kuberay(self)

    def prepare(self: Environment, claim: object = None) -> None:
        counted.prepared.append(self)
        self.check_input()
        raise ProvisioningError("no cluster in this test")

    main = pytest.main

    def counting_main(args: list[str], plugins: list[object]) -> int:
        counted.sessions.append((list(args), list(plugins)))
        return main(args, plugins=plugins)

    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / f"test_small_{uuid.uuid4().hex[:8]}.py").write_text(SUITE)  # one module name per session
    monkeypatch.setattr(profiles, "load", counting_load)
    monkeypatch.setattr(Environment, "__init__", counting_make)
    monkeypatch.setattr(Environment, "_check_kuberay", counting_check_kuberay)
    monkeypatch.setattr(Environment, "prepare", prepare)
    monkeypatch.setattr(Environment, "reachable_api", lambda self: None)
    monkeypatch.setattr(
        ExistingProvider, "up", lambda self: Cluster("existing", self.kubeconfig, self.context)
    )
    monkeypatch.setattr(
        suite_session, "args", lambda: [f"--rootdir={suite}", str(suite), "-p", "no:cacheprovider"]
    )
    monkeypatch.setattr(pytest, "main", counting_main)
    return counted


def _profile(tmp_path: Path) -> Path:
    """The bundled attach profile, with KubeRay from Helm (attach reads the cluster's CRDs in its checks)."""
    text = profiles.resources.path("profiles").joinpath("attach.yaml").read_text()
    path = tmp_path / "helm-attach.yaml"
    path.write_text(text.replace("install: existing", "install: helm"))
    return path


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_cli_builds_the_run_once_and_pytest_runs_that_run(
    counts: Counts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    run_dir = tmp_path / "reports" / f"krc-once-{workers}"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as ended:
        cli.main.main(
            ["run", "--provider", "existing", "--kubeconfig", str(kubeconfig),
             "--profile", str(_profile(tmp_path)), "--run-dir", str(run_dir), "--workers", workers,
             "--area", "raycluster", "--timeout", "ready=7"],
            standalone_mode=False,
        )  # fmt: skip
    summary = json.loads((run_dir / "summary.json").read_text())
    assert ended.value.code == 0, summary  # conformant: no check needed the environment that failed
    assert len(counts.profiles) == 1, counts.profiles
    assert len(counts.environments) == 1
    assert counts.input_checks == 1  # by the CLI; prepare's call found it done
    assert counts.prepared == counts.environments  # the session prepared the CLI's Environment
    (args, plugins), *others = counts.sessions
    assert not others
    assert not [a for a in args if a.startswith(options.PYTEST_PREFIX)], args
    (setup,) = [p for p in plugins if isinstance(p, RunSetup)]
    assert setup.environment is counts.environments[0] and setup.lock is None
    assert setup.options.timeouts.ready == 7 and setup.areas == ("raycluster",)
    assert summary["provider"] == "existing" and summary["profile"] == "attach"
    assert summary["environment"]["workers"] == int(workers)
    assert [t["outcome"] for t in summary["tests"]] == ["passed"] * 3
    assert summary["selection"]["areas"] == ["raycluster"]


def test_plain_pytest_builds_the_run_from_the_conformance_options_once(
    counts: Counts, tmp_path: Path
) -> None:
    """The documented `pytest --conformance-*` use: the plugin builds the same run from the options."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    run_dir = tmp_path / "reports" / "krc-plain"
    code = pytest.main(
        [*suite_session.args(), "-q", "--conformance-provider", "existing",
         "--conformance-kubeconfig", str(kubeconfig), "--conformance-profile", str(_profile(tmp_path)),
         "--conformance-run-dir", str(run_dir)],
        plugins=[],
    )  # fmt: skip
    assert code == pytest.ExitCode.OK
    assert len(counts.profiles) == 1 and len(counts.environments) == 1 and counts.input_checks == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [t["outcome"] for t in summary["tests"]] == ["passed"] * 3

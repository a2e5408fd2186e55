"""Terraform (or OpenTofu) orchestration shared by the `kind` and `eks` providers.

Each run gets a workspace of its own: a directory `<state root>/<provider>/<run id>/` holding a
copy of the module from infra/terraform/, the variables of the run, the local state (or, when a
backend is configured, the key of a workspace named after the run), the kubeconfig taken from the
outputs and a log of every command. `up` runs init, workspace select, apply and output; `down` runs
destroy and deletes the workspace. Whatever interrupts an apply (an error, Ctrl-C, SIGTERM), what
was created is destroyed before the exception goes on, unless the cluster is to be kept.

The CLI and the test suite also use the tools built here: OpenTofu and actionlint, from their Go
modules, through the same cached build as the local provider's programs.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance import interrupts, resources
from conformance.build.pins import GoTool
from conformance.errors import ProvisioningError, UsageError
from conformance.progress import progress
from conformance.providers.base import Cluster, ComponentStatus, ProviderStatus
from conformance.report.summary import new_run_id

# Checked against the Go module proxy on 2026-11-29: opentofu v1.12.6 and actionlint v1.7.12 are
# the newest it serves. OpenTofu's go.mod replaces hcl/v2 with its fork; gobuild carries that over.
TOFU_TOOL = GoTool(
    name="tofu",
    module="github.com/opentofu/opentofu",
    version="v1.12.6",
    packages=("github.com/opentofu/opentofu/cmd/tofu",),
    go_directive="1.26.6",
    # Upstream's godebug block (its other entry, winsymlink, only matters on Windows).
    godebug="tlsmlkem=0",
    # Without it `tofu version` reports a "-dev" build.
    ldflags=("-X github.com/opentofu/opentofu/version.dev=no",),
)
ACTIONLINT_TOOL = GoTool(
    name="actionlint",
    module="github.com/rhysd/actionlint",
    version="v1.7.12",
    packages=("github.com/rhysd/actionlint/cmd/actionlint",),
    go_directive="1.25.0",
)

# How long an interrupted terraform gets to stop cleanly (it saves its state) before it is killed.
STOP_GRACE_S = 300.0


def modules_dir() -> Path:
    """infra/terraform as the package ships it (package data), or KRC_TERRAFORM_MODULES."""
    default = resources.path("terraform")
    return Path(os.environ.get("KRC_TERRAFORM_MODULES", default))


def state_root() -> Path:
    default = Path.home() / ".local" / "state" / "kuberay-conformance" / "terraform"
    return Path(os.environ.get("KRC_TF_STATE_DIR", default))


def find_terraform() -> Path | None:
    """KRC_TERRAFORM if set, else `tofu`, else `terraform` on PATH."""
    explicit = os.environ.get("KRC_TERRAFORM")
    if explicit:
        found = shutil.which(explicit)
        return Path(found) if found else None
    for name in ("tofu", "terraform"):
        found = shutil.which(name)
        if found:
            return Path(found)
    return None


def require_tools(provider: str, tools: Iterable[str]) -> Path:
    """The terraform binary; a one-line usage error naming every missing tool otherwise."""
    binary = find_terraform()
    missing = [] if binary else ["terraform or tofu"]
    missing += [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        raise UsageError(
            f"provider {provider} needs {', '.join(missing)} on PATH",
            "install them and run again"
            + ("" if binary else " (or set KRC_TERRAFORM to a terraform/tofu binary)"),
        )
    assert binary is not None
    return binary


def env_count(name: str, default: str, low: int, high: int) -> int:
    """A whole number from the environment, or a usage error that names the variable and the range."""
    text = os.environ.get(name, default)
    if not text.isdigit() or not low <= int(text) <= high:
        raise UsageError(f"{name}={text!r} is out of range", f"use a whole number from {low} to {high}")
    return int(text)


def utc_rfc3339(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def slug(text: str) -> str:
    """Lower-case letters, digits and '-': what cluster and workspace names accept."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# --- one run's workspace -------------------------------------------------------------------------


@dataclass(frozen=True)
class RunWorkspace:
    """The directory of one run of one provider, and the record of where its cluster stands."""

    provider: str
    run_id: str
    root: Path

    @classmethod
    def for_run(cls, provider: str, run_id: str) -> RunWorkspace:
        return cls(provider, run_id, state_root() / provider / run_id)

    @classmethod
    def load(cls, root: Path) -> RunWorkspace:
        record = json.loads((root / "record.json").read_text())
        return cls(record["provider"], record["run_id"], root)

    @classmethod
    def live(cls, provider: str) -> list[RunWorkspace]:
        """Workspaces of `provider` whose cluster may exist (applied, or apply begun), oldest first."""
        found = []
        for record in sorted((state_root() / provider).glob("*/record.json")):
            workspace = cls.load(record.parent)
            if workspace.state in ("applying", "applied", "destroy-failed"):
                found.append(workspace)
        return found

    @property
    def name(self) -> str:
        """The terraform workspace, one per run (and so one state per run, remote or local)."""
        return f"krc-{slug(self.run_id)}"

    @property
    def module_dir(self) -> Path:
        return self.root / "module"

    @property
    def var_file(self) -> Path:
        return self.root / "run.tfvars.json"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def log(self) -> Path:
        return self.root / "terraform.log"

    def record(self) -> dict[str, Any]:
        try:
            return json.loads((self.root / "record.json").read_text())
        except (OSError, ValueError):
            return {}

    @property
    def state(self) -> str:
        return str(self.record().get("state", "new"))

    def update(self, **fields: object) -> None:
        """Merge `fields` into record.json; written whole then renamed, so a reader never sees half."""
        record = {"provider": self.provider, "run_id": self.run_id, **self.record(), **fields}
        self.root.mkdir(parents=True, exist_ok=True)
        partial = self.root / "record.json.partial"
        partial.write_text(json.dumps(record, indent=2) + "\n")
        partial.rename(self.root / "record.json")


@dataclass(frozen=True)
class Backend:
    """Remote state: a backend type (s3, gcs, ...) and a file of its settings for `init -backend-config`."""

    kind: str
    config: Path

    @classmethod
    def from_env(cls) -> Backend | None:
        kind, config = os.environ.get("KRC_TF_BACKEND", ""), os.environ.get("KRC_TF_BACKEND_CONFIG", "")
        if not kind and not config:
            return None  # local state, in the run's directory
        if not (kind and config):
            raise UsageError(
                "KRC_TF_BACKEND and KRC_TF_BACKEND_CONFIG go together",
                "set both (e.g. s3 and a file with bucket, key, region) or neither for local state",
            )
        if not re.fullmatch(r"[a-z0-9]+", kind):
            raise UsageError(f"KRC_TF_BACKEND={kind!r} is not a backend type", "use e.g. s3, gcs or azurerm")
        path = Path(config).resolve()
        if not path.is_file():
            raise UsageError(f"KRC_TF_BACKEND_CONFIG={config} does not exist", "point it at a backend file")
        return cls(kind, path)


# --- running terraform -----------------------------------------------------------------------------


@dataclass
class Terraform:
    """Runs terraform/tofu in one run's workspace, logging every command to the workspace's log."""

    binary: Path
    workspace: RunWorkspace
    backend: Backend | None = None
    env: dict[str, str] = field(default_factory=dict)

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(TF_IN_AUTOMATION="1", TF_INPUT="0", CHECKPOINT_DISABLE="1")
        # Providers are downloaded once per machine, not once per run.
        env.setdefault("TF_PLUGIN_CACHE_DIR", str(state_root() / "plugin-cache"))
        Path(env["TF_PLUGIN_CACHE_DIR"]).mkdir(parents=True, exist_ok=True)
        env.update(self.env)
        return env

    def prepare(self, module: str) -> None:
        """Copy infra/terraform/<module> into the run's directory, so edits to the checkout during a
        run change nothing and no .terraform/ or state lands in the repository."""
        source = modules_dir() / module
        if not (source / "versions.tf").exists():
            raise ProvisioningError(f"no Terraform module at {source}", "set KRC_TERRAFORM_MODULES")
        shutil.copytree(
            source,
            self.workspace.module_dir,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns(".terraform", "*.tfstate*", "terraform.tfstate.d"),
        )
        if self.backend is not None:
            (self.workspace.module_dir / "krc_backend.tf").write_text(
                f'terraform {{\n  backend "{self.backend.kind}" {{}}\n}}\n'
            )

    def init(self) -> None:
        args = ["init", "-input=false", "-no-color"]
        if self.backend is not None:
            args.append(f"-backend-config={self.backend.config}")
        self.run(args)

    def select_workspace(self) -> None:
        self.run(["workspace", "select", "-or-create=true", self.workspace.name])

    def apply(self) -> None:
        self.run(
            ["apply", "-input=false", "-auto-approve", "-no-color", f"-var-file={self.workspace.var_file}"]
        )

    def outputs(self) -> dict[str, Any]:
        out = self.run(["output", "-json"], capture=True)
        try:
            data = json.loads(out)
        except ValueError as exc:
            raise ProvisioningError("`output -json` printed no JSON", f"see {self.workspace.log}") from exc
        return {name: entry.get("value") for name, entry in data.items()}

    def destroy(self, lock_timeout: str = "0s") -> None:
        # Never cut short by an interrupt: a half-done destroy leaves resources that cost money.
        self.run(
            [
                "destroy",
                "-input=false",
                "-auto-approve",
                "-no-color",
                f"-lock-timeout={lock_timeout}",
                f"-var-file={self.workspace.var_file}",
            ],
            interruptible=False,
        )

    def workspaces(self) -> list[str]:
        """The workspaces the backend holds (`workspace list` marks the selected one with '*')."""
        listed = self.run(["workspace", "list"], capture=True)
        return [line.strip().lstrip("*").strip() for line in listed.splitlines() if line.strip()]

    def delete_workspace(self) -> None:
        self.run(["workspace", "select", "default"], interruptible=False)
        self.run(["workspace", "delete", self.workspace.name], interruptible=False)

    def run(self, args: Sequence[str], capture: bool = False, interruptible: bool = True) -> str:
        argv = [str(self.binary), f"-chdir={self.workspace.module_dir}", *args]
        self.workspace.root.mkdir(parents=True, exist_ok=True)
        with self.workspace.log.open("a") as log:
            log.write(f"$ {' '.join(argv)}\n")
            log.flush()
            with progress(f"{self.binary.name} {args[0]} ({self.workspace.provider}, {self.workspace.name})"):
                # A session of its own: Ctrl-C at the terminal reaches us only, and we decide how
                # terraform stops (SIGINT, so it saves its state), instead of both racing.
                proc = subprocess.Popen(
                    argv,
                    stdout=subprocess.PIPE if capture else log,
                    stderr=log,
                    text=True,
                    env=self._environment(),
                    start_new_session=True,
                )
                out = _wait(proc, interruptible)
        if proc.returncode != 0:
            raise ProvisioningError(
                f"`{self.binary.name} {args[0]}` failed for {self.workspace.provider} run "
                f"{self.workspace.run_id}: {_last_line(self.workspace.log)}",
                f"see {self.workspace.log}",
            )
        return out


def _wait(proc: subprocess.Popen[str], interruptible: bool) -> str:
    """Wait for `proc`; on an interrupt, stop it gracefully (or, if not interruptible, let it
    finish), then raise the interrupt again."""
    pending: BaseException | None = None
    deadline: float | None = None
    while True:
        try:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            out, _ = proc.communicate(timeout=timeout)
            break
        except subprocess.TimeoutExpired:
            proc.kill()  # it ignored SIGINT for STOP_GRACE_S
            deadline = None
        except (KeyboardInterrupt, interrupts.Interrupted) as exc:
            if pending is None and interruptible:
                proc.send_signal(signal.SIGINT)
                deadline = time.monotonic() + STOP_GRACE_S
            pending = pending or exc
    if pending is not None:
        raise pending
    return out or ""


def _last_line(log: Path) -> str:
    try:
        lines = [line.strip() for line in log.read_text().splitlines() if line.strip()]
    except OSError:
        return "no output"
    errors = [line for line in lines if line.startswith(("Error:", "│ Error:"))]
    return (errors or lines or ["no output"])[-1].lstrip("│ ")


# --- the provider both kind and eks are --------------------------------------------------------------


class TerraformProvider:
    """A provider whose cluster is made by a module in infra/terraform/ (see kind.py and eks.py).

    With a run id (a conformance run), it makes and removes that run's cluster only. Without one
    (`cluster up` from the CLI) it starts a new run; `down` then removes every cluster of this
    provider that a run left behind.
    """

    name = ""
    module = ""
    tools: tuple[str, ...] = ()

    def __init__(self, run_id: str | None = None, keep_cluster: bool = False) -> None:
        self.run_id = run_id
        self.keep_cluster = keep_cluster
        self._cluster: Cluster | None = None

    # -- what each provider says -----------------------------------------------------------

    def check_settings(self) -> None:
        """Refuse bad settings (region, budget, credentials) with a UsageError; creates nothing."""

    def variables(self, workspace: RunWorkspace) -> dict[str, Any]:
        raise NotImplementedError

    def facts(self, outputs: dict[str, Any]) -> dict[str, object]:
        return {}

    def destroy_variables(self, workspace: RunWorkspace) -> dict[str, Any] | None:
        """Variables enough to destroy a run this machine has no record of, from remote state (the
        reaper, another runner); None: this provider cannot do that."""
        return None

    def before_apply(self, terraform: Terraform) -> None:
        """Called once init succeeded, right before the first apply."""

    def after_destroy(self, workspace: RunWorkspace) -> None:
        """Called once a workspace was destroyed."""

    # -- the Provider interface ------------------------------------------------------------

    def preflight(self) -> Path:
        """Every check that needs no cluster, before anything is created; returns terraform's path."""
        binary = require_tools(self.name, self.tools)
        Backend.from_env()
        self.check_settings()
        return binary

    def up(self) -> Cluster:
        if self._cluster is not None:
            return self._cluster
        binary = self.preflight()
        self.run_id = self.run_id or new_run_id()
        workspace = RunWorkspace.for_run(self.name, self.run_id)
        terraform = Terraform(binary, workspace, Backend.from_env())
        terraform.prepare(self.module)
        workspace.var_file.write_text(json.dumps(self.variables(workspace), indent=2) + "\n")
        workspace.update(state="initialising", binary=str(binary), module=self.module)
        terraform.init()
        terraform.select_workspace()
        try:
            self.before_apply(terraform)
            workspace.update(state="applying")
            terraform.apply()
            outputs = terraform.outputs()
            self._cluster = self._cluster_from(workspace, outputs)
        except BaseException:
            if not self.keep_cluster:
                self._destroy(terraform)  # best effort; the first error is what the user needs
            raise
        workspace.update(state="applied")
        return self._cluster

    def _cluster_from(self, workspace: RunWorkspace, outputs: dict[str, Any]) -> Cluster:
        kubeconfig = outputs.get("kubeconfig")
        if not isinstance(kubeconfig, str) or not kubeconfig.strip():
            raise ProvisioningError(
                f"module {self.module} has no `kubeconfig` output", f"see {workspace.module_dir}/outputs.tf"
            )
        workspace.kubeconfig.write_text(kubeconfig)
        workspace.kubeconfig.chmod(0o600)
        facts = {"terraform_workspace": workspace.name, "run_id": workspace.run_id, **self.facts(outputs)}
        return Cluster(provider=self.name, kubeconfig=workspace.kubeconfig, facts=facts)

    def down(self) -> list[str]:
        if self.run_id is not None:
            workspace = RunWorkspace.for_run(self.name, self.run_id)
            backend = Backend.from_env()
            if not workspace.record() and backend is not None:
                self._adopt(workspace, backend)  # a run made elsewhere: its state is in the backend
            targets = [workspace] if workspace.state not in ("new", "destroyed", "absent") else []
        else:
            targets = RunWorkspace.live(self.name)
        problems = []
        for workspace in targets:
            binary = Path(workspace.record().get("binary") or find_terraform() or "terraform")
            problem = self._destroy(Terraform(binary, workspace, Backend.from_env()))
            if problem:
                problems.append(problem)
        self._cluster = None
        return problems

    def _adopt(self, workspace: RunWorkspace, backend: Backend) -> None:
        """Make this machine's record of a run whose state only the backend holds: a copy of the
        module, variables enough to destroy, init, and its workspace selected (state `applied`), or
        state `absent` when the backend has no workspace of that run. Nothing for a provider that
        cannot say its destroy variables."""
        variables = self.destroy_variables(workspace)
        if variables is None:
            return
        binary = require_tools(self.name, ())
        terraform = Terraform(binary, workspace, backend)
        terraform.prepare(self.module)
        workspace.var_file.write_text(json.dumps(variables, indent=2) + "\n")
        # No record until the backend has answered: a failed init leaves nothing that would make
        # the next `down` believe the run was never applied.
        terraform.init()
        held = workspace.name in terraform.workspaces()
        if held:
            terraform.run(["workspace", "select", workspace.name])
        state = "applied" if held else "absent"
        workspace.update(state=state, binary=str(binary), module=self.module, adopted=True)

    def _destroy(self, terraform: Terraform) -> str:
        """Destroy and forget the workspace; returns what went wrong, or ''."""
        workspace = terraform.workspace
        if workspace.state in ("new", "initialising"):
            return ""  # apply never started: nothing can exist
        try:
            terraform.destroy()
            workspace.update(state="destroyed")
            terraform.delete_workspace()
        except ProvisioningError as exc:
            if workspace.state != "destroyed":
                workspace.update(state="destroy-failed")
            return exc.one_line()
        finally:
            if workspace.state == "destroyed":
                self.after_destroy(workspace)
        return ""

    def _current(self) -> RunWorkspace | None:
        if self.run_id is not None:
            workspace = RunWorkspace.for_run(self.name, self.run_id)
            return workspace if workspace.state not in ("new", "destroyed") else None
        live = RunWorkspace.live(self.name)
        return live[-1] if live else None

    def status(self) -> ProviderStatus:
        workspace = self._current()
        if workspace is None:
            return ProviderStatus(self.name, exists=False, summary="no cluster made by this provider")
        state = workspace.state
        components = (
            ComponentStatus("terraform", state == "applied", f"workspace {workspace.name}: {state}"),
            ComponentStatus(
                "kubeconfig", workspace.kubeconfig.exists(), str(workspace.kubeconfig) + " (from the outputs)"
            ),
        )
        return ProviderStatus(self.name, exists=True, components=components)

    def env(self) -> dict[str, str]:
        workspace = self._current()
        if workspace is None or not workspace.kubeconfig.exists():
            raise UsageError(
                f"provider {self.name} has no cluster",
                f"run: kuberay-conformance cluster up --provider {self.name}",
            )
        return {"KUBECONFIG": str(workspace.kubeconfig)}


# --- the budget guard: a process that outlives the run and destroys at the deadline ---------------

# After the deadline, how long the run gets to destroy its own cluster before the guard does.
GUARD_GRACE_S = float(os.environ.get("KRC_GUARD_GRACE_S", "900"))


def start_guard(terraform: Terraform, deadline: float, harness_pid: int) -> int:
    """Start the budget guard of a workspace; returns its PID (recorded for `down` to stop it)."""
    workspace = terraform.workspace
    argv = [
        sys.executable,
        "-m",
        "conformance.providers.terraform",
        "guard",
        str(workspace.root),
        str(deadline),
        str(harness_pid),
        str(terraform.binary),
    ]
    with (workspace.root / "guard.log").open("a") as log:
        # Its own session: it must survive the run's exit and a Ctrl-C aimed at the run.
        proc = subprocess.Popen(
            argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
        )
    workspace.update(guard_pid=proc.pid, deadline=utc_rfc3339(deadline))
    return proc.pid


def stop_guard(workspace: RunWorkspace) -> None:
    pid = workspace.record().get("guard_pid")
    if isinstance(pid, int) and _is_guard(pid, workspace):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


def _is_guard(pid: int, workspace: RunWorkspace) -> bool:
    """Only the guard of this workspace is ever signalled, never a process that reused its PID."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"guard" in cmdline and str(workspace.root).encode() in cmdline


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def guard(root: Path, deadline: float, harness_pid: int, binary: Path) -> int:
    """Sleep until the deadline; then stop the run (SIGTERM, so it cleans up and writes its report)
    and, if the cluster still exists after a grace period, destroy it here."""
    workspace = RunWorkspace.load(root)

    def destroyed() -> bool:
        return workspace.state in ("destroyed", "new", "initialising")

    while time.time() < deadline:
        if destroyed():
            return 0
        time.sleep(min(30.0, max(0.1, deadline - time.time())))  # poll-interval: the run may end first
    if destroyed():
        return 0
    print(f"budget guard: {workspace.name} passed its deadline {utc_rfc3339(deadline)}", flush=True)
    if _alive(harness_pid):
        os.kill(harness_pid, signal.SIGTERM)
        grace_end = time.time() + GUARD_GRACE_S
        while time.time() < grace_end and _alive(harness_pid) and not destroyed():
            time.sleep(1.0)  # poll-interval: the run's own cleanup may finish the destroy
    if destroyed():
        return 0
    terraform = Terraform(binary, workspace, Backend.from_env())
    try:
        # The run may still hold the state lock for a moment; wait for it rather than fail.
        terraform.destroy(lock_timeout="10m")
    except ProvisioningError as exc:
        workspace.update(state="destroy-failed")
        print(f"budget guard: destroy failed: {exc.one_line()}", flush=True)
        return 1
    workspace.update(state="destroyed", destroyed_by="budget guard")
    print(f"budget guard: destroyed {workspace.name}", flush=True)
    return 0


def _main(argv: list[str]) -> int:
    if len(argv) == 5 and argv[0] == "guard":
        return guard(Path(argv[1]), float(argv[2]), int(argv[3]), Path(argv[4]))
    print(
        "usage: python -m conformance.providers.terraform guard ROOT DEADLINE HARNESS_PID BINARY",
        file=sys.stderr,
    )
    return 3


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

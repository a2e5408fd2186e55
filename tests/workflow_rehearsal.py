"""Run a GitHub Actions job's `run:` steps here, as a GitHub runner would, for the CI rehearsal.

Test support, not product: the steps are read from the workflow file, so the rehearsal cannot drift
from what CI runs. `uses:` steps are not run; the rehearsal provides what they would (Python, Go and
Helm on PATH). Each `run:` step runs as `bash --noprofile --norc -eo pipefail` (the runner's default
shell) under a given unprivileged user, with the job's and the step's `env:`, `GITHUB_OUTPUT` and
`GITHUB_ENV` files, and `${{ }}` expressions evaluated over the contexts a step can see. `if:`
conditions are evaluated too (always(), success(), failure(), ==, !=, &&, ||, !), which is the subset
the project's workflows use; anything else is refused so a new construct cannot pass unnoticed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
CONTEXT_REF = re.compile(r"\b(github|matrix|steps|runner|vars|inputs|secrets|env)((?:\.[A-Za-z_][\w-]*)+)")
FUNCTIONS = {"always()": "True", "success()": "(not failed)", "failure()": "failed", "cancelled()": "False"}


@dataclass(frozen=True)
class Step:
    name: str
    run: str
    env: dict[str, str]
    condition: str
    step_id: str


@dataclass
class StepResult:
    name: str
    ran: bool
    exit_code: int = 0
    output: str = ""


@dataclass
class Job:
    """One job of a workflow: its `env:` and its `run:` steps in order."""

    env: dict[str, str]
    steps: list[Step]

    @classmethod
    def read(cls, workflow: Path, job: str) -> Job:
        doc = yaml.safe_load(workflow.read_text())
        body = doc["jobs"][job]
        steps = [
            Step(
                name=raw.get("name", raw["run"].splitlines()[0]),
                run=raw["run"],
                env={k: str(v) for k, v in (raw.get("env") or {}).items()},
                condition=str(raw.get("if", "success()")),
                step_id=raw.get("id", ""),
            )
            for raw in body["steps"]
            if "run" in raw
        ]
        return cls({k: str(v) for k, v in (body.get("env") or {}).items()}, steps)


@dataclass
class Contexts:
    """What `${{ }}` can read: github.*, matrix.*, runner.*, vars.*, steps.<id>.outputs.*, env.*"""

    values: dict[str, Any] = field(default_factory=dict)

    def lookup(self, path: str) -> str:
        node: Any = self.values
        for part in path.split("."):
            node = node.get(part, "") if isinstance(node, dict) else ""
        return "" if isinstance(node, dict) else str(node)

    def substitute(self, text: str) -> str:
        def one(match: re.Match[str]) -> str:
            expr = match.group(1)
            if not CONTEXT_REF.fullmatch(expr):
                raise ValueError(f"the rehearsal cannot evaluate ${{{{ {expr} }}}}")
            return self.lookup(expr)

        return EXPRESSION.sub(one, text)

    def condition(self, text: str, failed: bool) -> bool:
        expr = EXPRESSION.sub(lambda m: m.group(1), text).strip()
        for call, python in FUNCTIONS.items():
            expr = expr.replace(call, python)
        expr = CONTEXT_REF.sub(lambda m: repr(self.lookup(m.group(0))), expr)
        expr = expr.replace("&&", " and ").replace("||", " or ")
        expr = re.sub(r"!(?!=)", " not ", expr)
        if re.search(r"[A-Za-z_]\w*\(", expr):
            raise ValueError(f"the rehearsal cannot evaluate `if: {text}`")
        return bool(eval(expr, {"__builtins__": {}}, {"failed": failed}))


def run_job(
    job: Job, contexts: Contexts, user: str, workspace: Path, base_env: dict[str, str]
) -> list[StepResult]:
    """Every `run:` step of the job in order, as `user` in `workspace`, like a runner would."""
    results: list[StepResult] = []
    failed = False
    runner_temp = Path(contexts.lookup("runner.temp"))
    output_file, env_file = runner_temp / "github_output", runner_temp / "github_env"
    step_summary = runner_temp / "step_summary.md"
    _user_file(step_summary, user)
    exported: dict[str, str] = {}
    for step in job.steps:
        if not contexts.condition(step.condition, failed):
            results.append(StepResult(step.name, ran=False))
            continue
        for path in (output_file, env_file):
            _user_file(path, user)
        env = {**base_env, **{k: contexts.substitute(v) for k, v in job.env.items()}, **exported}
        env.update({k: contexts.substitute(v) for k, v in step.env.items()})
        env.update(GITHUB_OUTPUT=str(output_file), GITHUB_ENV=str(env_file), GITHUB_WORKSPACE=str(workspace))
        env.update(GITHUB_STEP_SUMMARY=str(step_summary), RUNNER_TEMP=str(runner_temp))
        script = runner_temp / "step.sh"
        script.write_text(contexts.substitute(step.run))
        done = subprocess.run(
            ["runuser", "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()),
             "bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=workspace, capture_output=True, text=True, check=False, timeout=3600,
        )  # fmt: skip
        results.append(StepResult(step.name, True, done.returncode, done.stdout + done.stderr))
        if step.step_id:
            contexts.values.setdefault("steps", {})[step.step_id] = {"outputs": _key_values(output_file)}
        exported.update(_key_values(env_file))
        failed = failed or done.returncode != 0
    return results


def _user_file(path: Path, user: str) -> None:
    """An empty file the step's user may write, as the runner makes GITHUB_OUTPUT and its kin."""
    path.write_text("")
    shutil.chown(path, user, user)


def _key_values(path: Path) -> dict[str, str]:
    """name=value lines, as a step writes them to GITHUB_OUTPUT or GITHUB_ENV."""
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {name: value for name, value in pairs}


def user_env(home: Path, path: list[Path]) -> dict[str, str]:
    """A clean environment for the user: its HOME, PATH, and this machine's CA settings (registry
    traffic here passes a TLS-intercepting proxy whose CA only the host bundle has)."""
    env = {"HOME": str(home), "PATH": os.pathsep.join(str(p) for p in path), "LANG": "C.UTF-8", "CI": "true"}
    for name in ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env

"""What a seeded fault is: how KubeRay is made to misbehave, and which check must catch it.

A fault comes into a conformance run through the run itself, since every run re-installs the
operator while it prepares (a change made beforehand would be undone):
- `env`, `extra_args`, `feature_gates`, `version`: written into a copy of the default profile
  (`kuberay.env`, `kuberay.extra_args`, ...), so the run installs the misconfigured operator;
- `claimed_version`: the run installs an older operator from source that claims a newer version;
- `on_checkout`: the run installs the KubeRay checkout the user names (KRC_KUBERAY_CHECKOUT);
- `rogue`: a function run inside the run's process once it has prepared (see rogue.py), acting
  on the cluster behind the operator's back (patching, deleting, scaling what KubeRay made);
- `attached`: the run attaches to the local cluster as an existing one, where nothing tells the
  harness that the node's GPUs are only advertised.

Faults live in `faults_<area>.py` modules beside this one, each a list named FAULTS.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkouts import OLDER_MODULE  # what a `claimed_version` fault builds

SUITES = "conformance/suites/"


@dataclass(frozen=True)
class Check:
    """One conformance check: `test_module.py::test_name`, narrowed by a parametrization id part."""

    module: str
    name: str
    param: str = ""

    @classmethod
    def parse(cls, text: str) -> Check:
        path, _, rest = text.partition("::")
        name, _, param = rest.partition("[")
        return cls(path, name, param.rstrip("]"))

    def keyword(self) -> str:
        """This check as a pytest -k term."""
        return f"({self.name} and {self.param})" if self.param else self.name

    def matches(self, test_id: str) -> bool:
        """Whether a summary.json test id is (a parametrization of) this check."""
        base, _, params = test_id.partition("[")
        return base == f"{SUITES}{self.module}::{self.name}" and self.param in params

    def __str__(self) -> str:
        return f"{self.module}::{self.name}" + (f"[{self.param}]" if self.param else "")


@dataclass(frozen=True)
class Fault:
    name: str  # a slug: the test id and the results file name
    area: str
    misbehaviour: str  # what the seeded KubeRay does wrong, in one sentence
    catches: tuple[str, ...]  # checks that must end `expect` (Check.parse syntax)
    bystanders: tuple[str, ...] = ()  # run alongside; must end passed or not_applicable
    env: dict[str, str] = field(default_factory=dict)  # kuberay.env of the seeded profile
    extra_args: tuple[str, ...] = ()  # kuberay.extra_args
    feature_gates: dict[str, bool] = field(default_factory=dict)  # on top of the default profile's
    version: str = ""  # an older operator (kuberay.version)
    # The OLDER_MODULE operator module built as a --kuberay-source checkout
    # that claims to be this version: an older operator where a newer one is promised, so the
    # checks of the newer version's behaviour run on one that lacks it.
    claimed_version: str = ""
    # Run on the KubeRay checkout KRC_KUBERAY_CHECKOUT names (--kuberay-source), for checks that
    # need what only a checkout gives: its Helm chart, and an installable previous minor.
    on_checkout: bool = False
    rogue: Callable[[Any], None] | None = None  # acts behind the operator's back (rogue.py)
    # Run through the `existing` provider on the local cluster, on what it runs (KubeRay and the
    # Gateway read back, nothing installed): the harness knows only what the cluster shows, so the
    # local provider's word that its GPUs are simulated is not there, and GPU nodes that hand no
    # device to a container are taken at their word.
    attached: bool = False
    # Needs a local cluster with worker nodes (KRC_LOCAL_NODES): its checks take a node away.
    worker_nodes: bool = False
    run_args: tuple[str, ...] = ()  # more CLI arguments, e.g. ("--timeout", "ready=90")
    expect: str = "failed"  # or "not_applicable": a seeded missing precondition
    # A phrase each catching check's reason must hold (one for all, or one per check in `catches`).
    evidence: str | tuple[str, ...] = ""

    @property
    def catching(self) -> list[Check]:
        return [Check.parse(c) for c in self.catches]

    def evidence_for(self, index: int) -> str:
        return self.evidence if isinstance(self.evidence, str) else self.evidence[index]

    @property
    def others(self) -> list[Check]:
        return [Check.parse(c) for c in self.bystanders]

    def keyword(self) -> str:
        return " or ".join(c.keyword() for c in [*self.catching, *self.others])

    def seed(self) -> str:
        """How the fault is seeded, in words for the benchmarks table."""
        parts = [f"env {k}={v}" for k, v in self.env.items()]
        parts += [f"arg {a}" for a in self.extra_args]
        parts += [f"gate {k}={str(v).lower()}" for k, v in self.feature_gates.items()]
        parts += [f"operator {self.version}"] if self.version else []
        if self.claimed_version:
            parts.append(f"operator {OLDER_MODULE} from source, claimed as {self.claimed_version}")
        parts += ["on the KRC_KUBERAY_CHECKOUT checkout"] if self.on_checkout else []
        parts += [f"rogue {self.rogue.__name__}"] if self.rogue else []
        parts += ["the local cluster attached as an existing cluster"] if self.attached else []
        return ", ".join(parts)


def target(function: Callable[..., Any]) -> str:
    """`module:function`, importable in the run's process (see runner.PLUGIN_PATH)."""
    return f"{function.__module__}:{function.__qualname__}"


def all_faults() -> list[Fault]:
    """Every FAULTS list of the faults_*.py modules of this package, in module order."""
    here = Path(__file__).parent
    found: list[Fault] = []
    for info in sorted(pkgutil.iter_modules([str(here)]), key=lambda m: m.name):
        if info.name.startswith("faults_"):
            found += importlib.import_module(f"{__package__}.{info.name}").FAULTS
    names = [f.name for f in found]
    duplicated = {n for n in names if names.count(n) > 1}
    if duplicated:
        raise ValueError(f"fault names used twice: {sorted(duplicated)}")
    return found

"""The one way to reach a cluster: a kubeconfig and a context, the same for every client.

The Python client, helm and kubectl must all talk to the same cluster; on a machine with several
clusters, a helm that used the kubeconfig's current context while the Python client used
`--context` would install into the wrong one. Everything that spawns helm or kubectl takes its
flags from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class KubeTarget:
    kubeconfig: Path
    context: str | None = None  # None: the kubeconfig's current context, for every client alike

    def helm_args(self) -> list[str]:
        return [
            "--kubeconfig",
            str(self.kubeconfig),
            *(["--kube-context", self.context] if self.context else []),
        ]

    def kubectl_args(self) -> list[str]:
        return ["--kubeconfig", str(self.kubeconfig), *(["--context", self.context] if self.context else [])]

    def shell_env(self) -> dict[str, str]:
        """What a shell needs so helm reaches this cluster (kubectl reads no context variable:
        `cluster env` adds an alias for it)."""
        env = {"KUBECONFIG": str(self.kubeconfig)}
        if self.context:
            env["HELM_KUBECONTEXT"] = self.context
        return env

"""The `existing` provider: a cluster someone else made, reached through a kubeconfig and context.

It creates nothing and so removes nothing; `up` only checks that the cluster answers.
"""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from conformance.errors import HarnessError, ProvisioningError, UsageError
from conformance.kube.target import KubeTarget, api_client
from conformance.providers.base import Cluster, ComponentStatus, ProviderStatus


class ExistingProvider:
    name = "existing"

    def __init__(self, kubeconfig: str | Path | None = None, context: str | None = None) -> None:
        default = os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config")).split(os.pathsep)[0]
        self.kubeconfig = Path(kubeconfig or default)
        self.context = context

    def _check_reachable(self) -> str:
        if not self.kubeconfig.exists():
            raise UsageError(
                f"kubeconfig {self.kubeconfig} does not exist", "pass --kubeconfig PATH or set KUBECONFIG"
            )
        self._check_context()
        try:
            api = api_client(KubeTarget(self.kubeconfig, self.context))
        except ConfigException as exc:
            raise UsageError(f"kubeconfig {self.kubeconfig} is unusable: {exc}", "check --context") from exc
        try:
            info = client.VersionApi(api).get_code(_request_timeout=10)
        except Exception as exc:
            # The kubeconfig is well formed; what it names is down or out of reach: the environment
            # (exit 2), as a nightly job whose cluster is away must not read as its own mistake.
            raise ProvisioningError(
                f"the cluster in {self.kubeconfig} does not answer ({type(exc).__name__})",
                "check that it is running and that the kubeconfig's server address is reachable",
            ) from exc
        return str(info.git_version)

    def _check_context(self) -> None:
        """A context the kubeconfig lacks is named with the ones it has, before anything connects."""
        try:
            contexts, current = config.list_kube_config_contexts(str(self.kubeconfig))
        except (ConfigException, OSError, ValueError) as exc:
            raise UsageError(
                f"kubeconfig {self.kubeconfig} is unusable: {exc}", "pass a working one with --kubeconfig"
            ) from None
        names = [c["name"] for c in contexts or []]
        wanted = self.context or (current or {}).get("name")
        if wanted not in names:
            which = f"context {self.context!r}" if self.context else "its current-context"
            raise UsageError(
                f"kubeconfig {self.kubeconfig} has no {which} (it has: {', '.join(names) or 'none'})",
                "pass --context with one of them",
            )

    def up(self) -> Cluster:
        self._check_reachable()
        return Cluster(provider=self.name, kubeconfig=self.kubeconfig, context=self.context)

    def down(self) -> list[str]:
        return []

    def status(self) -> ProviderStatus:
        try:
            version = self._check_reachable()
        except HarnessError as exc:  # no such kubeconfig or context (usage), or no answer (provisioning)
            return ProviderStatus(self.name, exists=False, summary=exc.one_line())
        return ProviderStatus(
            self.name, exists=True, components=(ComponentStatus("api-server", True, f"answers, {version}"),)
        )

    def env(self) -> dict[str, str]:
        return KubeTarget(self.kubeconfig, self.context).shell_env()

"""Providers make or attach to the cluster under test, behind one small interface (see base.py)."""

from __future__ import annotations

import os

from conformance.errors import UsageError
from conformance.providers.base import Cluster, Provider, ProviderStatus

PROVIDERS = ("local", "existing", "kind", "eks")

__all__ = ["PROVIDERS", "Cluster", "Provider", "ProviderStatus", "get_provider"]


def get_provider(name: str, **options: object) -> Provider:
    """The provider called `name`; unknown names are a usage error before anything happens."""
    if name == "local":
        from conformance.providers.local.provider import LocalProvider  # noqa: PLC0415

        # Worker nodes for a new cluster: the profile's (KRC_LOCAL_NODES overrides them).
        return LocalProvider(profile_nodes=options.get("local_nodes"))  # type: ignore[arg-type]
    if name == "existing":
        from conformance.providers.existing import ExistingProvider  # noqa: PLC0415

        return ExistingProvider(kubeconfig=options.get("kubeconfig"), context=options.get("context"))  # type: ignore[arg-type]
    if name in ("kind", "eks"):
        # A cluster per run, named after it, kept only when the run asks for it. kind: the kind CLI,
        # or Terraform (one workspace per run) with KRC_KIND_VIA=terraform; eks: Terraform.
        run_id = options.get("run_id")
        return _made_per_run(name)(
            run_id=str(run_id) if run_id else None, keep_cluster=bool(options.get("keep_cluster"))
        )
    raise UsageError(f"unknown provider {name!r}", f"choose one of: {', '.join(PROVIDERS)}")


def _made_per_run(name: str) -> type:
    if name == "eks":
        from conformance.providers.eks import EksProvider  # noqa: PLC0415

        return EksProvider
    via = os.environ.get("KRC_KIND_VIA", "cli")
    if via == "terraform":
        from conformance.providers.kind_terraform import KindTerraformProvider  # noqa: PLC0415

        return KindTerraformProvider
    if via != "cli":
        raise UsageError(
            f"KRC_KIND_VIA={via!r} is neither cli nor terraform", "unset it (the kind CLI) or set terraform"
        )
    from conformance.providers.kind import KindProvider  # noqa: PLC0415

    return KindProvider

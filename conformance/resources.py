"""Files the harness ships beside its code: profiles, manifests, Terraform modules, templates.

They are package data (see pyproject.toml), found through importlib.resources, so an installed
wheel works as well as a checkout. `manifests/` and `infra/terraform/` stay at the top of the
repository, where the layout puts them; `conformance/_data/` holds links to them that the wheel
build follows, so the installed package carries real copies.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_SHIPPED = {"manifests": "_data/manifests", "terraform": "_data/terraform"}


def path(name: str) -> Path:
    """The folder `name` (profiles, manifests, terraform, ...) inside the installed package."""
    root = resources.files("conformance")
    found = root.joinpath(*_SHIPPED.get(name, name).split("/"))
    return Path(str(found)).resolve()

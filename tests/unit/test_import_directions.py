"""Imports point down: every module of conformance/ sits on a floor, and imports only from its own
floor or the floors below it (docs/architecture.md says why each package sits where it does).

Every import counts: at module level, inside functions (where a lazy import would otherwise hide
an upward one) and under `if TYPE_CHECKING:`. A unit is a sub-package (`conformance/kube/`) or a
top-level module (`conformance/plugin.py`); units share a floor, and on floors whose units do not
form one body, they do not import each other either. Whatever the floors allow, the units never
import each other in a circle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "conformance"

# Bottom first: (name, its units, whether its units may import each other).
FLOORS: tuple[tuple[str, str, bool], ...] = (
    # Leaf modules every package uses: errors and exit codes, typed timeouts, interrupts, the
    # progress line, the files shipped beside the code, the CPU-pressure reading, the per-check
    # phase timers that waits report to.
    ("base", "errors timeouts interrupts progress resources node_pressure stopwatch", True),
    # What needs no cluster: pins, Go builds, images and their cache; the profile schema.
    ("build", "build profiles", False),
    # Talking to a cluster (apply, waits on watches, Ray objects as checks read them, diagnostics);
    # results and reports, which are pure data and files.
    ("kube", "kube report", False),
    # Putting things into a cluster: KubeRay, the Gateway, add-ons; the load generator.
    ("install", "install load", False),
    # Where clusters come from; the local provider installs its storage add-on.
    ("providers", "providers", False),
    # One run: the environment a run prepares, its capabilities, parallel workers, exclusive
    # checks, the Lease, the selection of checks, and the pytest plugin that drives them.
    (
        "run",
        "capabilities capacity cluster_lock environment exclusive footprint parallel selection"
        " options session checks outcomes fixtures plugin",
        True,
    ),
    # The checks and what only they use.
    ("suites", "suites samples", True),
    # The command line and what only it uses.
    ("cli", "cli entry listing suite_session workflow_budget", True),
)
# The local cluster is local-only: outside it, only the provider registry names it (lazily).
LOCAL = "conformance.providers.local"
LOCAL_MAY_BE_IMPORTED_BY = frozenset({"conformance.providers"})


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, e.g. conformance.kube.wait
    target: str  # the imported module, e.g. conformance.errors
    where: str  # path:line


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(root: Path) -> Iterator[Import]:
    """Every import of a module of the package by a module of the package, at any depth."""
    for path in sorted((root / PACKAGE).rglob("*.py")):
        source = module_name(root, path)
        package = source if path.name == "__init__.py" else source.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                # `from pkg import sub` imports the module pkg.sub where there is one.
                names = [_submodule(root, f"{base}.{alias.name}") or base for alias in node.names]
            else:
                continue
            for name in names:
                if name == PACKAGE or name.startswith(PACKAGE + "."):
                    yield Import(source, name, where)


def _submodule(root: Path, dotted: str) -> str | None:
    path = root.joinpath(*dotted.split("."))
    return dotted if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file() else None


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else PACKAGE


def floors() -> dict[str, tuple[int, str, bool]]:
    return {
        u: (index, name, sideways)
        for index, (name, units, sideways) in enumerate(FLOORS)
        for u in units.split()
    }


def direction_problems(root: Path) -> list[str]:
    placed = floors()
    problems = []
    for imp in imports(root):
        src, dst = unit(imp.source), unit(imp.target)
        for name in (src, dst):
            if name not in placed and name != PACKAGE:
                problems.append(f"{imp.where}: {PACKAGE}.{name} is on no floor: add it to FLOORS")
        if dst in (src, PACKAGE) or src not in placed or dst not in placed:
            continue
        (src_floor, src_name, sideways), (dst_floor, dst_name, _) = placed[src], placed[dst]
        if dst_floor > src_floor or (dst_floor == src_floor and not sideways):
            problems.append(
                f"{imp.where}: {imp.source} (floor {src_floor}, {src_name}) imports {imp.target} "
                f"(floor {dst_floor}, {dst_name})"
            )
        if (imp.target == LOCAL or imp.target.startswith(LOCAL + ".")) and not (
            imp.source.startswith(LOCAL) or imp.source in LOCAL_MAY_BE_IMPORTED_BY
        ):
            problems.append(
                f"{imp.where}: {imp.source} imports {imp.target}, which only the local provider uses"
            )
    return sorted(set(problems))


def cycles(root: Path) -> list[list[str]]:
    """The circles among units (one per strongly connected component larger than one unit)."""
    graph: dict[str, set[str]] = {}
    for imp in imports(root):
        src, dst = unit(imp.source), unit(imp.target)
        if src != dst and PACKAGE not in (src, dst):
            graph.setdefault(src, set()).add(dst)
            graph.setdefault(dst, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_import_points_down_or_sideways_where_a_floor_allows_it() -> None:
    problems = direction_problems(ROOT)
    assert not problems, "imports against the floors (docs/architecture.md):\n" + "\n".join(problems)


def test_no_two_packages_import_each_other_even_through_others() -> None:
    assert cycles(ROOT) == []


def test_every_package_and_top_level_module_is_on_a_floor() -> None:
    on_disk = {p.stem for p in (ROOT / PACKAGE).glob("*.py") if p.name != "__init__.py"}
    on_disk |= {p.parent.name for p in (ROOT / PACKAGE).glob("*/__init__.py")}
    assert on_disk - set(floors()) == set(), "place it in FLOORS, and say why in docs/architecture.md"


def test_a_new_upward_import_is_caught_at_any_depth(tmp_path: Path) -> None:
    """The checker itself: a function-level import from kube/ up into install/, and a circle."""
    lazy_upward = "from conformance import errors\n\n\ndef f():\n    from ..install import gateway\n"
    for rel, text in {
        "conformance/__init__.py": "",
        "conformance/errors.py": "",
        "conformance/kube/__init__.py": "",
        "conformance/kube/wait.py": lazy_upward,
        "conformance/install/__init__.py": "",
        "conformance/install/gateway.py": "from conformance.kube.wait import f\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert direction_problems(tmp_path) == [
        "conformance/kube/wait.py:5: conformance.kube.wait (floor 2, kube) imports"
        " conformance.install.gateway (floor 3, install)"
    ]
    assert cycles(tmp_path) == [["install", "kube"]]

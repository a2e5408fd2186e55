"""A profile's validation errors as a user reads them: the line in the file, the key path, the fix.

pydantic reports every problem at once; each becomes one line. The YAML node tree gives each key
path its line and the text as written (`2.10`, which YAML has already turned into 2.1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from conformance.errors import UsageError

Loc = tuple[int | str, ...]
EXAMPLE = "see conformance/profiles/default.yaml or `kuberay-conformance profile schema`"


@dataclass(frozen=True)
class Problem:
    where: str  # "line 4, ray_versions[0]"
    what: str
    fix: str

    def line(self) -> str:
        return f"{self.where}: {self.what}; {self.fix}"


class ProfileError(UsageError):
    """A profile with one or more problems; every one is listed, one line each."""

    def __init__(self, source: Path, problems: list[Problem]) -> None:
        self.problems, self.source = problems, source
        if len(problems) == 1:
            only = problems[0]
            super().__init__(f"profile {source}: {only.where}: {only.what}", only.fix)
        else:
            super().__init__(
                f"profile {source} has {len(problems)} problems",
                "; ".join(dict.fromkeys(p.fix for p in problems)),
            )

    def one_line(self) -> str:
        if len(self.problems) == 1:
            return f"profile {self.source}: {self.problems[0].line()}"
        lines = "\n".join(f"  {p.line()}" for p in self.problems)
        return f"profile {self.source} has {len(self.problems)} problems:\n{lines}"


def explain(exc: ValidationError, model: type[BaseModel], source: Path, text: str) -> ProfileError:
    root = _compose(text)
    problems = [_problem(error, model, root) for error in exc.errors()]
    return ProfileError(source, problems)


def where(text: str, loc: Loc) -> str:
    """`line 4, ray_versions[0]`: where a key path is in the file's text."""
    return _where(_compose(text), loc)


def _where(root: yaml.Node | None, loc: Loc) -> str:
    node = _node_at(root, loc)
    line = f"line {node.start_mark.line + 1}, " if node is not None else ""
    return f"{line}{_dotted(loc)}" if loc else f"{line}the document"


def _problem(error: Any, model: type[BaseModel], root: yaml.Node | None) -> Problem:
    loc: Loc = tuple(error["loc"])
    node = _node_at(root, loc)
    value = error.get("input")
    written = node.value if isinstance(node, yaml.ScalarNode) else None
    what, fix = _words(error["type"], value, written, error.get("ctx") or {}, loc, model)
    return Problem(_where(root, loc), what, fix)


_WHOLE = ("must be a whole number, not {shown}", "write a whole number >= 0, unquoted")
_NUMBER = ("must be a number, not {shown}", "write a number (seconds for timeouts), unquoted")
_MAPPING = ("must be a mapping, not {shown}", f"write key: value pairs ({EXAMPLE})")
# pydantic's error types -> (what is wrong, the fix), where the wording needs no more than the value.
_PLAIN = {
    "missing": ("missing", f"add it ({EXAMPLE})"),
    "bool_type": ("{shown} is not a boolean", "write true or false, unquoted"),
    "string_type": ("{shown} is not a string", "write a string"),
    "int_type": _WHOLE,
    "int_parsing": _WHOLE,
    "int_from_float": _WHOLE,
    "float_type": _NUMBER,
    "float_parsing": _NUMBER,
    "dict_type": _MAPPING,
    "model_type": _MAPPING,
    "model_attributes_type": _MAPPING,
    "list_type": ("must be a list, not {shown}", 'write a list, e.g. ["2.58.0"]'),
    "too_short": ("is empty", "give at least one entry"),
    "string_too_short": ("is empty", "write a non-empty string"),
}


def _words(
    kind: str, value: Any, written: str | None, ctx: dict[str, Any], loc: Loc, model: type[BaseModel]
) -> tuple[str, str]:
    shown = written if written is not None and not isinstance(value, str) else repr(value)
    if kind == "extra_forbidden":
        known = _known_keys(model, loc[:-1])
        return "unknown key", f"remove it or correct its spelling (known here: {', '.join(known)})"
    if kind == "string_type" and isinstance(value, int | float) and not isinstance(value, bool):
        return f"{shown} is a number, not a string", f'quote it: "{shown}"'
    if kind == "literal_error":
        choices = ", ".join(c.strip("'") for c in ctx["expected"].replace(" or ", ", ").split(", "))
        return f"{value!r} is not one of the choices", f"use one of {choices}"
    if kind in ("greater_than", "greater_than_equal"):
        bound = ctx.get("gt", ctx.get("ge"))
        return f"{shown} is out of range", f"use a number {'>' if 'gt' in ctx else '>='} {bound}"
    if kind == "string_pattern_mismatch":
        return f"{shown} does not match {ctx.get('pattern')}", _pattern_fix(loc)
    what, fix = _PLAIN.get(kind, ("{shown}: " + kind, EXAMPLE))
    return what.format(shown=shown), fix


def _pattern_fix(loc: Loc) -> str:
    if loc and loc[0] == "ray_versions":
        return 'write a Ray version such as "2.58.0"'
    if loc and loc[0] == "resources":
        return 'write a Kubernetes quantity such as "500m" or "2Gi"'
    return EXAMPLE


def _known_keys(model: type[BaseModel], loc: Loc) -> list[str]:
    """The keys the model takes at `loc` (a path into nested sections)."""
    for key in loc:
        field = model.model_fields.get(str(key))
        annotation = field.annotation if field else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


def _dotted(loc: Loc) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


class Loader(yaml.SafeLoader):
    """YAML 1.2's booleans: only true/false. YAML 1.1 (PyYAML's default) also reads yes, no, on
    and off as booleans, which is how `simulated: no` or a gate `on` would slip through."""


Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def _compose(text: str) -> yaml.Node | None:
    try:
        return yaml.compose(text, Loader=Loader)
    except yaml.YAMLError:
        return None


def _node_at(node: yaml.Node | None, loc: Loc) -> yaml.Node | None:
    """The node at `loc` (its key when the value is a section), or the deepest one that exists:
    a missing key points at its section."""
    shown = node
    for part in loc:
        key, value = _child(node, part)
        if value is None:
            return shown
        node = value
        shown = value if isinstance(value, yaml.ScalarNode) or key is None else key
    return shown


def _child(node: yaml.Node | None, part: int | str) -> tuple[yaml.Node | None, yaml.Node | None]:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if key.value == str(part):
                return key, value
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        return None, node.value[part]
    return None, None

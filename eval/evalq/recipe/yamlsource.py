"""YAML loading that remembers where each key came from.

Error messages must name the file and the line of the offending key, so the loader keeps a
map from key paths (``("candidates", 2, "quantization")``) to ``(file, line)``. ``include:``
(lm-evaluation-harness' habit) merges other YAML files first, relative to the including file;
the including file's keys win, dicts merge deeply, lists are replaced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from evalq.core.errors import InputError
from evalq.core.locations import builtin_recipe_names, resolve_include

KeyPath = tuple[str | int, ...]


@dataclass
class Located:
    """A parsed YAML document plus where each key path was written."""

    data: dict[str, Any]
    lines: dict[KeyPath, tuple[Path, int]] = field(default_factory=dict)

    def where(self, path: KeyPath) -> tuple[Path | None, int | None]:
        """The closest recorded location of ``path`` or of one of its parents."""
        for cut in range(len(path), -1, -1):
            hit = self.lines.get(tuple(path[:cut]))
            if hit:
                return hit
        return None, None


def _walk(
    node: yaml.Node, path: KeyPath, file: Path, lines: dict[KeyPath, tuple[Path, int]]
) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            line = key_node.start_mark.line + 1
            # PyYAML keeps the last of two equal keys silently; a recipe must not.
            if isinstance(key, str) and key in seen:
                dotted = ".".join(str(p) for p in (*path, key))
                raise InputError(message=f"key '{key}' appears twice (lines {seen[key]} and "
                                 f"{line}); YAML would silently keep the last one",
                                 file=file, line=line, field=dotted,
                                 fix="delete one of the two")
            if isinstance(key, str):
                seen[key] = line
            sub = (*path, key)
            lines[sub] = (file, key_node.start_mark.line + 1)
            _walk(value_node, sub, file, lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            sub = (*path, i)
            lines[sub] = (file, item.start_mark.line + 1)
            _walk(item, sub, file, lines)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def load_yaml(path: str | Path, _stack: tuple[Path, ...] = ()) -> Located:
    path = Path(path)
    if path.is_dir():
        raise InputError(message="this is a folder, not a recipe file", file=path,
                         fix=f"name a YAML file, e.g. {path / 'quickstart.yaml'}")
    if not path.is_file():
        raise InputError(
            message="file not found",
            file=path,
            fix="check the path; built-in recipes resolve by name: "
            + ", ".join(builtin_recipe_names()),
        )
    resolved = path.resolve()
    if resolved in _stack:
        chain = " -> ".join(str(p) for p in (*_stack, resolved))
        raise InputError(message=f"include cycle: {chain}", file=path, field="include",
                         fix="remove one of the includes")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(message=f"not UTF-8 text ({exc.reason} at byte {exc.start})", file=path,
                         fix="save the file as UTF-8") from None
    return parse_yaml_text(text, path, (*_stack, resolved))


def parse_yaml_text(text: str, path: Path, _stack: tuple[Path, ...] = ()) -> Located:
    """``text`` as the recipe file ``path`` (its includes resolved beside it): what
    :func:`load_yaml` does after reading, and what ``evalq init`` checks its output with
    before writing it."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except RecursionError:
        raise InputError(message="YAML nested too deeply", file=path,
                         fix="flatten the document") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(
            message=f"invalid YAML: {getattr(exc, 'problem', exc)}",
            file=path,
            line=mark.line + 1 if mark else None,
            fix="fix the YAML syntax (indentation, quotes, a missing colon)",
        ) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(message="the top level must be a mapping of keys", file=path, line=1,
                         fix="start the file with keys such as 'name:' and 'model:'")
    lines: dict[KeyPath, tuple[Path, int]] = {}
    if node is not None:
        _walk(node, (), path, lines)
    includes = data.pop("include", None)
    if includes is None:
        return Located(data, lines)
    if isinstance(includes, str):
        includes = [includes]
    if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
        raise InputError(message="'include' must be a file name or a list of file names",
                         file=path, line=lines.get(("include",), (path, None))[1],
                         field="include", fix="write include: base.yaml")
    merged: dict[str, Any] = {}
    merged_lines: dict[KeyPath, tuple[Path, int]] = {}
    include_line = lines.get(("include",), (path, None))[1]
    for inc in includes:
        try:
            sub = load_yaml(resolve_include(path.parent, inc), _stack)
        except InputError as exc:
            if exc.message in ("file not found", "this is a folder, not a recipe file"):
                raise InputError(message=f"included file '{inc}' ({path.parent / inc}): "
                                 f"{exc.message}", file=path, line=include_line,
                                 field="include", fix="include paths are relative to the "
                                 "including file; check the name") from None
            raise
        merged = _merge(merged, sub.data)
        merged_lines.update(sub.lines)
    merged_lines.update({k: v for k, v in lines.items() if k != ("include",)})
    return Located(_merge(merged, data), merged_lines)

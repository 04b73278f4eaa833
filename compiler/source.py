"""Safe YAML loading that keeps the source position of every key and value.

Duplicate keys are refused (PyYAML silently keeps the last one; dbt's checked_load does the same
refusal), non-standard tags such as !!python/object are refused, and alias expansion is bounded so
a "billion laughs" document cannot exhaust memory.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .diagnostics import Diagnostic, PlanInputError

# A plan is a few kilobytes; 1 MiB leaves room for large inline catalogs and refuses a 50 MB file unread.
MAX_PLAN_BYTES = 1 << 20
# Nodes in the document (counted while parsing, before any is built) and after expanding aliases; a real plan
# has a few hundred, a user catalog of 15 GPUs about 500.
MAX_NODES = 20_000
# Nesting deeper than any plan needs; refused before Python's recursion limit is reached.
MAX_DEPTH = 64
# Text the pure-Python parser may still read after libyaml refused it, for its messages: it composes ~100 KiB/s, so
# a 1 MiB document it alone reads would take ten seconds.
MAX_PURE_PARSE_BYTES = 64 << 10

_INT, _FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_STANDARD_TAGS = {"tag:yaml.org,2002:" + t for t in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp")}

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class Position:
    line: int  # 1-based
    column: int  # 1-based


@dataclass(frozen=True)
class LoadedYaml:
    data: Any
    file: str
    text: str
    value_positions: dict[Loc, Position]
    key_positions: dict[Loc, Position]

    def position(self, loc: Loc, *, key: bool = False) -> Position:
        """Closest known position for a field path: the value (or key), else its nearest parent."""
        table = self.key_positions if key else self.value_positions
        for end in range(len(loc), -1, -1):
            found = table.get(loc[:end]) or self.value_positions.get(loc[:end])
            if found:
                return found
        return Position(1, 1)


def _pos(mark: yaml.Mark) -> Position:
    return Position(mark.line + 1, mark.column + 1)


class _Builder:
    def __init__(self, file: str):
        self.file = file
        self.values: dict[Loc, Position] = {}
        self.keys: dict[Loc, Position] = {}
        self.nodes = 0
        self.scalars = yaml.SafeLoader("")

    def fail(self, node: yaml.Node, message: str, code: str, loc: Loc) -> PlanInputError:
        p = _pos(node.start_mark)
        path = ".".join(str(part) for part in loc)
        return PlanInputError([Diagnostic(p.line, p.column, path, message, code, file=self.file)])

    def build(self, node: yaml.Node, loc: Loc = ()) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(
                node, f"document expands to more than {MAX_NODES} nodes (alias bomb?)", "yaml-too-large", loc
            )
        if len(loc) > MAX_DEPTH:
            raise self.fail(node, f"nesting deeper than {MAX_DEPTH} levels", "yaml-too-deep", loc)
        if node.tag not in _STANDARD_TAGS:
            raise self.fail(node, f"tag {node.tag!r} is not allowed in a plan", "yaml-tag", loc)
        self.values.setdefault(loc, _pos(node.start_mark))
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, loc)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, loc + (i,)) for i, item in enumerate(node.value)]
        return self._scalar(node, loc)

    def _scalar(self, node: yaml.Node, loc: Loc) -> Any:
        """A scalar's value; one Python cannot hold (a 5,000-digit integer, 2024-02-30) is located at the scalar, and
        so is a plain 1:30, which YAML 1.1 reads as the base-60 number 90."""
        if node.style is None and ":" in node.value and node.tag in (_INT, _FLOAT):
            message = f"{node.value} is a base-60 number in YAML 1.1 ({self.scalars.construct_object(node)!r}); "
            raise self.fail(node, message + "write the number itself, or quote it", "yaml-sexagesimal", loc)
        try:
            return self.scalars.construct_object(node, deep=True)
        except (ValueError, OverflowError) as exc:
            raise self.fail(node, f"invalid value: {str(exc)[:120]}", "yaml-value", loc) from None

    def _mapping(self, node: yaml.MappingNode, loc: Loc) -> dict:
        result: dict = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise self.fail(key_node, "merge keys ('<<') are not supported in a plan", "yaml-merge", loc)
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.fail(key_node, "mapping keys must be plain scalars", "yaml-key", loc)
            key = self._scalar(key_node, loc)
            if isinstance(key, bool):  # yes/no/on/off/true/false: YAML 1.1 booleans, even as keys
                message = f"the key {key_node.value!r} reads as the boolean {key} in YAML 1.1; quote it to use the word"
                raise self.fail(key_node, message, "yaml-bool-key", loc)
            key = key if isinstance(key, str) else str(key)
            if key in result:
                first = self.keys[loc + (key,)]
                raise self.fail(
                    key_node,
                    f"duplicate key '{key}' (first defined at line {first.line})",
                    "duplicate-key",
                    loc + (key,),
                )
            self.keys[loc + (key,)] = _pos(key_node.start_mark)
            result[key] = self.build(value_node, loc + (key,))
        return result


_NODE_EVENTS = (yaml.ScalarEvent, yaml.AliasEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent)
# The pre-scan counts with libyaml's parser where PyYAML has it. Text it cannot read (a `%YAML 1.3` line, an unknown
# directive, a BOM after the start) is refused: the full parse below runs only on small text, for its messages.
_SCAN_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _scan_size(text: str, file: str) -> PlanInputError | None:
    """Refuse a document with too many nodes or too deep a nesting while streaming its events, before building
    any node: a 1 MiB list of 500k tiny items is refused in milliseconds instead of after seconds of composing.
    Returns the refusal of text the scan cannot read (raised by the caller), or None."""
    nodes = depth = 0
    try:
        for event in yaml.parse(text, Loader=_SCAN_LOADER):
            nodes += isinstance(event, _NODE_EVENTS)
            depth += isinstance(event, yaml.CollectionStartEvent) - isinstance(event, yaml.CollectionEndEvent)
            if nodes > MAX_NODES or depth > MAX_DEPTH:
                p = _pos(event.start_mark)
                message, code = (
                    (f"document has more than {MAX_NODES} nodes", "yaml-too-large")
                    if nodes > MAX_NODES
                    else (f"nesting deeper than {MAX_DEPTH} levels", "yaml-too-deep")
                )
                raise PlanInputError([Diagnostic(p.line, p.column, "", message, code, file=file)], text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = getattr(exc, "problem", None) or str(exc)
        message = f"invalid YAML: {problem} (libyaml reads plans: no %YAML 1.3 or unknown directive, a BOM only first)"
        return PlanInputError([Diagnostic(line, column, "", message, "yaml-syntax", file=file)], text)
    return None


def load_yaml_text(text: str, file: str) -> LoadedYaml:
    builder = _Builder(file)
    unreadable = _scan_size(text, file)
    if unreadable is not None and len(text.encode("utf-8", "surrogatepass")) > MAX_PURE_PARSE_BYTES:
        raise unreadable
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = exc.problem or str(exc)
        raise PlanInputError([Diagnostic(line, col, "", f"invalid YAML: {problem}", "yaml-syntax", file=file)], text)
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow: located by its offset
        before = (text[: exc.position] + "^").splitlines()
        message = (
            f"invalid YAML: character {chr(exc.character)!r} is not allowed"
            if isinstance(exc.character, int)
            else f"invalid YAML: {exc.reason}"
        )
        raise PlanInputError([Diagnostic(len(before), len(before[-1]), "", message, "yaml-syntax", file=file)], text)
    except yaml.YAMLError as exc:
        raise PlanInputError([Diagnostic(1, 1, "", f"invalid YAML: {exc}", "yaml-syntax", file=file)], text)
    except RecursionError:
        raise PlanInputError(
            [Diagnostic(1, 1, "", f"nesting deeper than {MAX_DEPTH} levels", "yaml-too-deep", file=file)], text
        )
    if unreadable is not None:  # the pure parser reads what libyaml does not: refused all the same
        raise unreadable
    if node is None:
        raise PlanInputError([Diagnostic(1, 1, "", "the plan is empty", "empty-plan", file=file)], text)
    try:
        data = builder.build(node)
    except PlanInputError as exc:
        raise PlanInputError(exc.diagnostics, text)
    except (yaml.YAMLError, ValueError) as exc:  # e.g. an impossible timestamp
        raise PlanInputError([Diagnostic(1, 1, "", f"invalid YAML value: {exc}", "yaml-value", file=file)], text)
    return LoadedYaml(data, file, text, builder.values, builder.keys)


def read_regular_file(path: Path, name: str) -> bytes:
    """The bytes of a regular file of at most MAX_PLAN_BYTES; a device, FIFO or directory is refused unread."""

    def refuse(message: str, code: str) -> PlanInputError:
        return PlanInputError([Diagnostic(0, 0, "", message, code, file=name)])

    try:  # O_NONBLOCK: opening a FIFO would otherwise wait for a writer
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise refuse("not a regular file", "file-not-regular")
            raw = handle.read(MAX_PLAN_BYTES + 1)
    except OSError as exc:
        raise refuse(f"cannot read file: {exc.strerror}", "file-unreadable") from None
    if len(raw) > MAX_PLAN_BYTES:
        raise refuse(f"file is larger than {MAX_PLAN_BYTES} bytes", "file-too-large")
    return raw


def load_yaml_file(path: Path, display_name: str | None = None) -> LoadedYaml:
    name = display_name or str(path)
    raw = read_regular_file(path, name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanInputError(
            [Diagnostic(0, 0, "", f"not UTF-8 text: {exc.reason} at byte {exc.start}", "file-encoding", file=name)]
        )
    return load_yaml_text(text, name)


def refuse_at(problems: list[tuple[Loc, str, str]], loaded: LoadedYaml) -> None:
    """Raise one located diagnostic per (field path, message, code), each at the field's position; nothing if none."""
    if problems:
        diagnostics = []
        for loc, message, code in problems:
            pos = loaded.position(loc)
            diagnostics.append(
                Diagnostic(pos.line, pos.column, ".".join(map(str, loc)), message, code, file=loaded.file)
            )
        raise PlanInputError(diagnostics, loaded.text)

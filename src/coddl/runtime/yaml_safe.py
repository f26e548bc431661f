"""Job files read as YAML without YAML's surprises: what a user wrote is what the job gets, or a
one-line error that names the line and the field.

PyYAML's ``safe_load`` follows YAML 1.1, where ``yes``, ``on`` and ``off`` are booleans, ``0x10``,
``017`` and ``1_000`` are integers, ``1:30`` is 90 and ``2024-01-02`` a date; a duplicate key silently
replaces the first; and aliases share one object, so a few hundred bytes of nested aliases (an "alias
bomb") expand to billions of values once anything walks them. Here:

- a plain scalar in a text field (``text_at(path)``: a name, a command word, an env value) is the text
  as written, so ``VERSION: 1.10`` stays ``"1.10"`` and ``DEBUG: yes`` stays ``"yes"``;
- elsewhere plain scalars follow the YAML 1.2 core schema (``true``/``false``, decimal integers,
  floats, ``null``), and a form YAML 1.1 would read differently (``yes``, ``0x10``, ``1_000``, a
  timestamp) is an error that says how to write it unambiguously;
- duplicate keys, merge keys (``<<``) and tags are errors;
- at most ``MAX_ALIASES`` aliases, ``MAX_DEPTH`` levels and ``MAX_VALUES`` values once aliases are
  expanded: a bomb fails while it is being read, in microseconds.
"""

from __future__ import annotations

import re
from pathlib import Path as FilePath
from typing import Any, Callable

import yaml
from yaml.composer import Composer
from yaml.events import AliasEvent, ScalarEvent
from yaml.nodes import MappingNode, Node, ScalarNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver, Resolver
from yaml.scanner import Scanner

MAX_ALIASES = 16
MAX_DEPTH = 16
MAX_VALUES = 10_000

Path = tuple[str | int, ...]
_STR, _SEQ, _MAP = BaseResolver.DEFAULT_SCALAR_TAG, BaseResolver.DEFAULT_SEQUENCE_TAG, BaseResolver.DEFAULT_MAPPING_TAG
_NULL = {"", "~", "null", "Null", "NULL"}
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)")
_YAML11 = Resolver()  # PyYAML's YAML 1.1 resolution, to recognise what it would have coerced
_HOW = {
    "tag:yaml.org,2002:bool": "is a boolean only in YAML 1.1: write true or false, or quote it for text",
    "tag:yaml.org,2002:int": "is a number only in YAML 1.1 (hex, octal, '_' or ':' forms): write it in decimal, "
                             "or quote it for text",
    "tag:yaml.org,2002:float": "is a number only in YAML 1.1 ('_' or ':' forms): write it in plain decimal, "
                               "or quote it for text",
    "tag:yaml.org,2002:timestamp": "is a date in YAML 1.1: quote it",
}


class YamlError(ValueError):
    """A job file that is not plain, unambiguous YAML; the message is ``line N: field: problem``."""

    def __init__(self, line: int | None, path: Path, problem: str) -> None:
        self.line, self.path, self.problem = line, path, problem
        where = [f"line {line}"] if line is not None else []
        if path:
            where.append(dotted(path))
        super().__init__(": ".join([*where, problem]))


def dotted(path: Path) -> str:
    """A field path the way validation errors name it: ``env.DEBUG``, ``args.2``."""
    return ".".join(str(p) for p in path)


class _Loader(Reader, Scanner, Parser, Composer, BaseResolver):
    """PyYAML's reader, scanner, parser and composer with no implicit types (every untagged scalar
    composes as text; ``_Builder`` decides), counting aliases and nesting as the node graph forms."""

    def __init__(self, text: str) -> None:
        Reader.__init__(self, text)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        BaseResolver.__init__(self)
        self.aliases = 0
        self.depth = 0
        self.tagged: set[int] = set()  # scalars with an explicit tag (``!!str 1``)

    def compose_node(self, parent: Node | None, index: object) -> Node:  # noqa: D102 - PyYAML hook
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise YamlError(event.start_mark.line + 1, (), f"more than {MAX_ALIASES} aliases (*name); a job "
                                f"file needs few, and nested aliases can expand to billions of values")
            return super().compose_node(parent, index)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise YamlError(event.start_mark.line + 1, (), f"nested more than {MAX_DEPTH} levels deep")
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        if isinstance(event, ScalarEvent) and event.tag not in (None, "!"):
            self.tagged.add(id(node))
        return node


class _Builder:
    """Python values from the node graph, aliases expanded under a budget, with the YAML 1.2 rules."""

    def __init__(self, text_at: Callable[[Path], bool], tagged: set[int], lines: dict[str, int]) -> None:
        self.text_at = text_at
        self.tagged = tagged
        self.lines = lines
        self.values = 0
        self.open: set[int] = set()  # the collections being built: an alias to one of them is a cycle

    def build(self, node: Node, path: Path) -> Any:
        line = node.start_mark.line + 1
        self.lines.setdefault(dotted(path), line)
        self.values += 1
        if self.values > MAX_VALUES:
            raise YamlError(line, path, f"more than {MAX_VALUES:,} values once aliases are expanded")
        if isinstance(node, ScalarNode):
            return self._scalar(node, path, line)
        if id(node) in self.open:
            raise YamlError(line, path, "an alias refers to a collection that contains it (a cycle)")
        self.open.add(id(node))
        try:
            if isinstance(node, MappingNode):
                return self._mapping(node, path, line)
            self._plain_tag(node, _SEQ, path, line)
            return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
        finally:
            self.open.discard(id(node))

    def _plain_tag(self, node: Node, expected: str, path: Path, line: int) -> None:
        if node.tag != expected:
            raise YamlError(line, path, f"YAML tags are not supported ({node.tag})")

    def _mapping(self, node: MappingNode, path: Path, line: int) -> dict[str, Any]:
        self._plain_tag(node, _MAP, path, line)
        out: dict[str, Any] = {}
        first: dict[str, int] = {}
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if not isinstance(key_node, ScalarNode) or key_node.tag != _STR:
                raise YamlError(key_line, path, "a key must be plain text")
            key = key_node.value
            if key == "<<" and key_node.style is None:
                raise YamlError(key_line, path, "merge keys (<<) are not supported: write the fields out")
            if key in first:
                raise YamlError(key_line, path + (key,), f"duplicate key (first on line {first[key]})")
            first[key] = key_line
            out[key] = self.build(value_node, path + (key,))
        return out

    def _scalar(self, node: ScalarNode, path: Path, line: int) -> Any:
        self._plain_tag(node, _STR, path, line)
        value = node.value
        if node.style is not None or id(node) in self.tagged:
            return value  # quoted, a block, or !!str: text exactly as written
        if self.text_at(path):
            return None if value in _NULL else value
        if value in _NULL:
            return None
        if value in _BOOL:
            return _BOOL[value]
        if _INT.fullmatch(value):
            try:
                return int(value)
            except ValueError:  # more digits than Python converts (4,300)
                raise YamlError(line, path, f"an integer of {len(value):,} digits") from None
        if _FLOAT.fullmatch(value) and not value.lstrip("+-").isdigit():  # 010: octal in YAML 1.1
            special = value.lstrip("+-").startswith(".") and value[-1].isalpha()  # .inf, -.Inf, .NaN
            return float(value.replace(".", "", 1) if special else value)
        how = _HOW.get(_YAML11.resolve(ScalarNode, value, (True, False)))
        if how is not None:
            raise YamlError(line, path, f"{value!r} {how}")
        return value


def load(text: str, text_at: Callable[[Path], bool] = lambda _path: False, lines: dict[str, int] | None = None) -> Any:
    """One YAML document as Python values (dicts, lists, text, int, float, bool, None); ``lines``, if
    given, receives the line of each value by its dotted path (``env.LR``), for later messages."""
    try:
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = ", ".join(p for p in (e.context, e.problem) if p) or "not valid YAML"
        raise YamlError(mark.line + 1 if mark else None, (), problem) from None
    except yaml.reader.ReaderError as e:
        code = e.character if isinstance(e.character, int) else ord(e.character)
        raise YamlError(None, (), f"character U+{code:04X} at offset {e.position} is not allowed in YAML") from None
    if node is None:
        return None
    return _Builder(text_at, loader.tagged, {} if lines is None else lines).build(node, ())


class YamlFileError(ValueError):
    """A YAML file that cannot be read as plain YAML: the message starts with the file's name;
    ``path`` is the field the problem is in (empty when it is the file as a whole)."""

    def __init__(self, message: str, path: Path = ()) -> None:
        self.path = path
        super().__init__(message)


def read_file(
    file: FilePath, max_bytes: int, what: str, expected: str, text_at: Callable[[Path], bool] = lambda _path: False
) -> tuple[Any, dict[str, int]]:
    """A YAML file's values and the line of each field path (``env.LR``), or YamlFileError: the file
    exists, is at most ``max_bytes`` (read no further, so a huge file costs nothing), is UTF-8, is plain
    YAML (``load``) and is not empty. ``what`` names the document in errors ("a job file"),
    ``expected`` says what an empty one should have held ("a mapping of job fields")."""
    try:
        with file.open("rb") as f:
            raw = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise YamlFileError(f"{file}: no such file") from None
    except OSError as e:
        raise YamlFileError(f"{file}: cannot read: {e.strerror or type(e).__name__}") from None
    if len(raw) > max_bytes:
        size = f"{max_bytes >> 20} MiB" if max_bytes >= 1 << 20 else f"{max_bytes // 1024} KiB"
        raise YamlFileError(f"{file}: larger than {size}, the most {what} may be")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise YamlFileError(f"{file}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})") from None
    lines: dict[str, int] = {}
    try:
        data = load(text, text_at, lines)
    except YamlError as e:
        raise YamlFileError(f"{file}: {e}", e.path) from None
    if data is None:
        raise YamlFileError(f"{file}: empty (expected {expected})")
    return data, lines

"""Cluster specs: a YAML file (node groups, GPU types, links, switches) or Tiresias's cluster-spec CSV,
loaded into a ``Cluster``.

A spec is user input, so every mistake becomes one ``ClusterSpecError`` line naming the file and the
field path (``mixed.yaml: nodes[1].gpus: expected a positive integer, got -2``) that the CLI prints
before exiting with status 2.

    gpu_types:                      # every type the nodes use must be defined
      V100: {speed: 1.0, memory_gb: 32}
    links:                          # optional; GB/s and µs (defaults: LinkSpec)
      intra_node_gbps: 100
      inter_node_gbps: 12.5
      two_node_factor: 1.6          # all-reduces across exactly two nodes take 1.6× (calibrated)
    nodes_per_switch: 4             # optional; default: one switch
    nodes:
      - {count: 8, gpu_type: V100, gpus: 8, cpus: 48, memory_gb: 512}
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from coddl.core.cluster import MAX_CPUS_PER_NODE, MAX_GPUS, MAX_GPUS_PER_NODE, Cluster, GpuType, LinkSpec, Node


class ClusterSpecError(ValueError):
    """A cluster spec that cannot be used; the message is one line naming the file and field."""


def _shown(v: Any) -> str:
    return repr(v) if isinstance(v, str) else str(v)


def _number(v: Any, *, integer: bool, positive: bool) -> Any:
    ok_type = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok_type or (v <= 0 if positive else v < 0):
        kind = ("a positive " if positive else "a non-negative ") + ("integer" if integer else "number")
        raise PydanticCustomError("spec_number", "expected {kind}, got {got}", {"kind": kind, "got": _shown(v)})
    return v


PositiveInt = Annotated[int, BeforeValidator(lambda v: _number(v, integer=True, positive=True))]
PositiveFloat = Annotated[float, BeforeValidator(lambda v: _number(v, integer=False, positive=True))]
NonNegativeFloat = Annotated[float, BeforeValidator(lambda v: _number(v, integer=False, positive=False))]


_LINKS, _NODE = LinkSpec(), Node(name="", gpus=1)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


class GpuTypeSpec(_Strict):
    speed: PositiveFloat = 1.0
    memory_gb: PositiveFloat = 16.0


class LinksSpec(_Strict):
    intra_node_gbps: PositiveFloat = _LINKS.intra_node_gbps
    inter_node_gbps: PositiveFloat = _LINKS.inter_node_gbps
    intra_node_latency_us: NonNegativeFloat = _LINKS.intra_node_latency_us
    inter_node_latency_us: NonNegativeFloat = _LINKS.inter_node_latency_us
    two_node_factor: PositiveFloat = _LINKS.two_node_factor


class NodeGroupSpec(_Strict):
    gpu_type: str
    gpus: PositiveInt = Field(le=MAX_GPUS_PER_NODE)
    count: PositiveInt = Field(default=1, le=MAX_GPUS)
    cpus: PositiveInt = Field(default=_NODE.cpus, le=MAX_CPUS_PER_NODE)
    memory_gb: PositiveFloat = _NODE.memory_gb
    name: str | None = None  # node-name prefix; default "n" + a cluster-wide index


class ClusterSpec(_Strict):
    gpu_types: dict[str, GpuTypeSpec]
    nodes: list[NodeGroupSpec] = Field(min_length=1)
    links: LinksSpec = LinksSpec()
    nodes_per_switch: PositiveInt | None = None
    name: str | None = None


_MESSAGES = {
    "missing": "missing required field",
    "extra_forbidden": "unknown field",
    "string_type": "expected a string, got {got}",
    "dict_type": "expected a mapping, got {got}",
    "model_type": "expected a mapping, got {got}",
    "list_type": "expected a list, got {got}",
    "too_short": "expected at least one entry",
    "less_than_equal": "expected at most {le}, got {got}",
}


def _where(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _first_error(source: str, err: ValidationError) -> ClusterSpecError:
    errors = err.errors()
    e = errors[0]
    template = _MESSAGES.get(e["type"])
    msg = template.format(got=_shown(e.get("input")), **e.get("ctx", {})) if template else e["msg"]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return ClusterSpecError(f"{source}: {_where(tuple(e['loc']))}: {msg}{more}")


def cluster_from_spec(spec: ClusterSpec, source: str = "cluster spec") -> Cluster:
    undefined = [(i, g.gpu_type) for i, g in enumerate(spec.nodes) if g.gpu_type not in spec.gpu_types]
    if undefined:
        i, t = undefined[0]
        raise ClusterSpecError(f"{source}: nodes[{i}].gpu_type: unknown GPU type {t!r}; "
                               f"defined: {', '.join(spec.gpu_types) or 'none'}")
    total = sum(g.count * g.gpus for g in spec.nodes)
    if total > MAX_GPUS:
        raise ClusterSpecError(f"{source}: nodes: {total} GPUs in all, more than the {MAX_GPUS} a cluster may have")
    prefixes = [g.name for g in spec.nodes if g.name is not None]
    for i, g in enumerate(spec.nodes):
        if g.name is not None and prefixes.count(g.name) > 1:
            raise ClusterSpecError(f"{source}: nodes[{i}].name: {g.name!r} names more than one node group")
    nodes: list[Node] = []
    for g in spec.nodes:
        for j in range(g.count):
            i = len(nodes)
            switch = f"switch{i // spec.nodes_per_switch}" if spec.nodes_per_switch else "switch0"
            nodes.append(Node(name=f"{g.name}{j}" if g.name else f"n{i}", gpus=g.gpus, gpu_type=g.gpu_type,
                              cpus=g.cpus, memory_gb=g.memory_gb, switch=switch))
    types = {t: GpuType(t, memory_gb=s.memory_gb, speed=s.speed) for t, s in spec.gpu_types.items()}
    return Cluster(nodes=tuple(nodes), gpu_types=types, links=LinkSpec(**spec.links.model_dump()))


def parse_yaml_spec(text: str, source: str = "cluster spec") -> Cluster:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = " ".join(str(getattr(e, "problem", None) or e).split())  # one line, whatever PyYAML wrote
        raise ClusterSpecError(f"{source}: {where}not valid YAML ({problem})") from None
    if not isinstance(data, dict):
        raise ClusterSpecError(f"{source}: expected a mapping with gpu_types and nodes, got {type(data).__name__}")
    try:
        spec = ClusterSpec.model_validate(data)
    except ValidationError as e:
        raise _first_error(source, e) from None
    return cluster_from_spec(spec, source)


TIRESIAS_COLUMNS = ("num_switch", "num_node_p_switch", "num_gpu_p_node", "num_cpu_p_node", "mem_p_node")


def parse_tiresias_csv(text: str, source: str = "cluster spec", gpu_type: str = "V100") -> Cluster:
    """Tiresias's one-row spec: identical nodes, ``num_node_p_switch`` under each of ``num_switch``
    switches. It names no GPU type; ``gpu_type`` (default the reference V100) is used."""
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in TIRESIAS_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise ClusterSpecError(f"{source}: line 1: missing column(s) {', '.join(missing)}; "
                               f"expected {','.join(TIRESIAS_COLUMNS)}")
    rows = list(reader)
    if len(rows) != 1:
        raise ClusterSpecError(f"{source}: expected exactly one data row, got {len(rows)}")
    values: dict[str, int] = {}
    for col in TIRESIAS_COLUMNS:
        raw = (rows[0][col] or "").strip()
        try:
            values[col] = int(raw)
        except ValueError:
            values[col] = 0
        if values[col] < 1:
            raise ClusterSpecError(f"{source}: line 2: {col}: expected a positive integer, got {raw!r}")
    spec = ClusterSpec(gpu_types={gpu_type: GpuTypeSpec()}, nodes_per_switch=values["num_node_p_switch"],
                       nodes=[NodeGroupSpec(gpu_type=gpu_type, gpus=values["num_gpu_p_node"],
                                            count=values["num_switch"] * values["num_node_p_switch"],
                                            cpus=values["num_cpu_p_node"], memory_gb=values["mem_p_node"])])
    return cluster_from_spec(spec, source)


def load_cluster(path: str | Path) -> Cluster:
    """A cluster from a YAML spec, or from a Tiresias CSV spec when the file ends in ``.csv``."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ClusterSpecError(f"{p}: no such file") from None
    except (IsADirectoryError, UnicodeDecodeError) as e:
        raise ClusterSpecError(f"{p}: cannot read a cluster spec ({type(e).__name__})") from None
    if p.suffix.lower() == ".csv":
        return parse_tiresias_csv(text, p.name)
    return parse_yaml_spec(text, p.name)

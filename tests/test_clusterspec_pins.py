"""Hand-computed pins of ``clusterspec.py``: every field reaches the cluster it builds, every mistake is
one exact line naming the file (by its name) and the field, at each numeric boundary."""

from __future__ import annotations

from pathlib import Path

import pytest

from coddl.clusterspec import (TIRESIAS_COLUMNS, ClusterSpecError, _where, load_cluster, parse_tiresias_csv,
                               parse_yaml_spec)

BASE = "gpu_types: {V100: {}}\nnodes:\n  - {gpu_type: V100, gpus: 2}\n"


def _err(text: str, source: str = "c.yaml") -> str:
    with pytest.raises(ClusterSpecError) as e:
        parse_yaml_spec(text, source)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_every_field_reaches_the_cluster():
    text = """\
gpu_types:
  A: {speed: 2.5, memory_gb: 80}
  B: {}
links: {intra_node_gbps: 300, inter_node_gbps: 50, intra_node_latency_us: 0, inter_node_latency_us: 7.5,
        two_node_factor: 1.6}
nodes_per_switch: 2
nodes:
  - {count: 3, gpu_type: A, gpus: 8, cpus: 96, memory_gb: 1024, name: big-}
  - {gpu_type: B, gpus: 1}
  - {count: 2, gpu_type: B, gpus: 4}
"""
    c = parse_yaml_spec(text, "x.yaml")
    assert [(n.name, n.gpus, n.gpu_type, n.cpus, n.memory_gb, n.switch) for n in c.nodes] == [
        ("big-0", 8, "A", 96, 1024, "switch0"), ("big-1", 8, "A", 96, 1024, "switch0"),
        ("big-2", 8, "A", 96, 1024, "switch1"), ("n3", 1, "B", 32, 256.0, "switch1"),
        ("n4", 4, "B", 32, 256.0, "switch2"), ("n5", 4, "B", 32, 256.0, "switch2")]
    a, b = c.gpu_types["A"], c.gpu_types["B"]
    assert (a.name, a.speed, a.memory_gb) == ("A", 2.5, 80) and (b.speed, b.memory_gb) == (1.0, 16.0)
    L = c.links
    assert (L.intra_node_gbps, L.inter_node_gbps, L.intra_node_latency_us, L.inter_node_latency_us,
            L.two_node_factor) == (300, 50, 0, 7.5, 1.6)
    d = parse_yaml_spec(BASE)
    assert [(n.name, n.switch) for n in d.nodes] == [("n0", "switch0")]
    assert (d.links.intra_node_gbps, d.links.inter_node_gbps, d.links.intra_node_latency_us,
            d.links.inter_node_latency_us, d.links.two_node_factor) == (100.0, 12.5, 5.0, 20.0, 1.0)


@pytest.mark.parametrize("edit, message", [
    # numbers: positive, non-negative, integer; booleans are never numbers
    ("gpus: 0}", "nodes[0].gpus: expected a positive integer, got 0"),
    ("gpus: 1}", None),
    ("gpus: 2.0}", "nodes[0].gpus: expected a positive integer, got 2.0"),
    ("gpus: true}", "nodes[0].gpus: expected a positive integer, got True"),
    ("gpus: '2'}", "nodes[0].gpus: expected a positive integer, got '2'"),
    ("count: 0}", "nodes[0].count: expected a positive integer, got 0"),
    ("cpus: -1}", "nodes[0].cpus: expected a positive integer, got -1"),
    ("memory_gb: 0}", "nodes[0].memory_gb: expected a positive number, got 0"),
    ("memory_gb: 0.5}", None),
    ("memory_gb: 64}", None),
    ("memory_gb: false}", "nodes[0].memory_gb: expected a positive number, got False"),
    # text and mappings
    ("gpu_type: 5", "nodes[0].gpu_type: expected a string, got 5"),
])
def test_node_group_fields(edit, message):
    if edit.startswith("gpu_type"):
        text = BASE.replace("gpu_type: V100", edit)
    elif edit.startswith("gpus"):
        text = BASE.replace("gpus: 2}", edit)
    else:
        text = BASE.replace("gpus: 2}", "gpus: 2, " + edit)
    if message is None:
        parse_yaml_spec(text)
    else:
        assert _err(text) == f"c.yaml: {message}"


@pytest.mark.parametrize("links, message", [
    ("{intra_node_latency_us: 0, inter_node_latency_us: 0}", None),
    ("{intra_node_latency_us: -0.5}", "links.intra_node_latency_us: expected a non-negative number, got -0.5"),
    ("{inter_node_latency_us: -1}", "links.inter_node_latency_us: expected a non-negative number, got -1"),
    ("{inter_node_latency_us: yes}", "links.inter_node_latency_us: expected a non-negative number, got True"),
    ("{intra_node_gbps: 0}", "links.intra_node_gbps: expected a positive number, got 0"),
    ("{inter_node_gbps: 0.0}", "links.inter_node_gbps: expected a positive number, got 0.0"),
    ("{two_node_factor: 0}", "links.two_node_factor: expected a positive number, got 0"),
    ("{two_node_factor: x}", "links.two_node_factor: expected a positive number, got 'x'"),
    ("{gbps: 1}", "links.gbps: unknown field"),
    ("5", "links: expected a mapping, got 5"),
])
def test_links(links, message):
    text = BASE + f"links: {links}\n"
    if message is None:
        assert parse_yaml_spec(text).links.inter_node_latency_us == 0
    else:
        assert _err(text) == f"c.yaml: {message}"


@pytest.mark.parametrize("text, message", [
    ("gpu_types: [V100]\nnodes: [{gpu_type: V100, gpus: 1}]\n", "gpu_types: expected a mapping, got ['V100']"),
    ("gpu_types: {V100: 3}\nnodes: [{gpu_type: V100, gpus: 1}]\n", "gpu_types.V100: expected a mapping, got 3"),
    ("gpu_types: {V100: {speed: 0}}\nnodes: [{gpu_type: V100, gpus: 1}]\n",
     "gpu_types.V100.speed: expected a positive number, got 0"),
    ("gpu_types: {V100: {}}\nnodes: 5\n", "nodes: expected a list, got 5"),
    ("gpu_types: {V100: {}}\nnodes: [5]\n", "nodes[0]: expected a mapping, got 5"),
    ("gpu_types: {V100: {}}\nnodes: []\n", "nodes: expected at least one entry"),
    ("nodes: [{gpu_type: V100, gpus: 1}]\n", "gpu_types: missing required field"),
    (BASE + "colour: red\n", "colour: unknown field"),
    (BASE + "nodes_per_switch: 0\n", "nodes_per_switch: expected a positive integer, got 0"),
    (BASE + "name: 5\n", "name: expected a string, got 5"),
    # three mistakes: the first, and the count of the others
    ("gpu_types: {V100: {speed: 0, memory_gb: 0}}\nnodes: [{gpu_type: V100, gpus: 0}]\n",
     "gpu_types.V100.speed: expected a positive number, got 0 (and 2 more)"),
    ("gpu_types: {V100: {speed: 0}}\nnodes: [{gpu_type: V100, gpus: 0}]\n",
     "gpu_types.V100.speed: expected a positive number, got 0 (and 1 more)"),
])
def test_shape_mistakes(text, message):
    assert _err(text) == f"c.yaml: {message}"


def test_where_names_the_top_level_when_there_is_no_path():
    assert _where(()) == "(top level)"
    assert _where(("nodes", 3, "gpus")) == "nodes[3].gpus"
    assert _where((0, "a")) == "[0].a"


def test_gpu_types_must_be_defined_and_group_names_distinct():
    assert _err("gpu_types: {}\nnodes: [{gpu_type: V100, gpus: 1}]\n") == \
        "c.yaml: nodes[0].gpu_type: unknown GPU type 'V100'; defined: none"
    two = "gpu_types: {A: {}, B: {}}\nnodes: [{gpu_type: A, gpus: 1}, {gpu_type: C, gpus: 1}, {gpu_type: D, gpus: 1}]\n"
    assert _err(two) == "c.yaml: nodes[1].gpu_type: unknown GPU type 'C'; defined: A, B"
    named = ("gpu_types: {A: {}}\nnodes: [{gpu_type: A, gpus: 1, name: x}, {gpu_type: A, gpus: 1, name: y},"
             " {gpu_type: A, gpus: 1, name: y}, {gpu_type: A, gpus: 1}, {gpu_type: A, gpus: 1}]\n")
    assert _err(named) == "c.yaml: nodes[1].name: 'y' names more than one node group"
    ok = named.replace("name: y}, {gpu_type: A, gpus: 1, name: y}", "name: y}, {gpu_type: A, gpus: 1, name: z}")
    assert [n.name for n in parse_yaml_spec(ok).nodes] == ["x0", "y0", "z0", "n3", "n4"]


def test_not_yaml_or_not_a_mapping():
    assert _err("a: [\n") == "c.yaml: line 2: not valid YAML (expected the node content, but found '<stream end>')"
    assert _err("") == "c.yaml: expected a mapping with gpu_types and nodes, got NoneType"
    assert _err("- 1\n") == "c.yaml: expected a mapping with gpu_types and nodes, got list"
    assert _err("x") == "c.yaml: expected a mapping with gpu_types and nodes, got str"


HEADER = ",".join(TIRESIAS_COLUMNS) + "\n"


def test_tiresias_csv_builds_switches_of_identical_nodes():
    c = parse_tiresias_csv(HEADER + " 2 ,3,4,16,128\n", "t.csv", gpu_type="K80")
    assert len(c.nodes) == 6 and c.total_gpus == 24
    assert [n.switch for n in c.nodes] == ["switch0"] * 3 + ["switch1"] * 3
    assert {(n.gpus, n.gpu_type, n.cpus, n.memory_gb) for n in c.nodes} == {(4, "K80", 16, 128)}
    assert list(c.gpu_types) == ["K80"] and c.gpu_types["K80"].speed == 1.0
    assert parse_tiresias_csv(HEADER + "1,1,1,1,1\n").nodes[0].gpu_type == "V100"


@pytest.mark.parametrize("text, message", [
    ("num_switch,num_gpu_p_node\n1,1\n",
     "line 1: missing column(s) num_node_p_switch, num_cpu_p_node, mem_p_node; expected "
     "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node"),
    ("", "line 1: missing column(s) num_switch, num_node_p_switch, num_gpu_p_node, num_cpu_p_node, mem_p_node; "
         "expected num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node"),
    (HEADER, "expected exactly one data row, got 0"),
    (HEADER + "1,1,1,1,1\n1,1,1,1,1\n", "expected exactly one data row, got 2"),
    (HEADER + "0,1,1,1,1\n", "line 2: num_switch: expected a positive integer, got '0'"),
    (HEADER + "1,-1,1,1,1\n", "line 2: num_node_p_switch: expected a positive integer, got '-1'"),
    (HEADER + "1,1,1.5,1,1\n", "line 2: num_gpu_p_node: expected a positive integer, got '1.5'"),
    (HEADER + "1,1,1,,1\n", "line 2: num_cpu_p_node: expected a positive integer, got ''"),
    (HEADER + "1,1,1,1\n", "line 2: mem_p_node: expected a positive integer, got ''"),
])
def test_tiresias_csv_mistakes(text, message):
    with pytest.raises(ClusterSpecError) as e:
        parse_tiresias_csv(text, "t.csv")
    assert str(e.value) == f"t.csv: {message}"


def test_load_cluster_reads_by_suffix_and_names_the_file(tmp_path: Path):
    (tmp_path / "spec.CSV").write_text(HEADER + "1,2,4,8,64\n")
    assert load_cluster(tmp_path / "spec.CSV").total_gpus == 8
    (tmp_path / "bad.csv").write_text(HEADER + "1,2,0,8,64\n")
    with pytest.raises(ClusterSpecError) as e:
        load_cluster(tmp_path / "bad.csv")
    assert str(e.value) == "bad.csv: line 2: num_gpu_p_node: expected a positive integer, got '0'"
    (tmp_path / "bad.yaml").write_text(BASE.replace("gpus: 2", "gpus: 0"))
    with pytest.raises(ClusterSpecError) as e:
        load_cluster(str(tmp_path / "bad.yaml"))
    assert str(e.value) == "bad.yaml: nodes[0].gpus: expected a positive integer, got 0"
    with pytest.raises(ClusterSpecError) as e:
        load_cluster(tmp_path)
    assert str(e.value) == f"{tmp_path}: cannot read a cluster spec (IsADirectoryError)"
    (tmp_path / "latin.yaml").write_bytes(b"gpu_types: {V\xe9: {}}\n")
    with pytest.raises(ClusterSpecError) as e:
        load_cluster(tmp_path / "latin.yaml")
    assert str(e.value) == f"{tmp_path / 'latin.yaml'}: cannot read a cluster spec (UnicodeDecodeError)"
    with pytest.raises(ClusterSpecError) as e:
        load_cluster(tmp_path / "absent.yaml")
    assert str(e.value) == f"{tmp_path / 'absent.yaml'}: no such file"


def test_without_a_file_name_a_spec_is_called_cluster_spec():
    from coddl.clusterspec import ClusterSpec, GpuTypeSpec, NodeGroupSpec, cluster_from_spec

    with pytest.raises(ClusterSpecError) as e:
        parse_yaml_spec(BASE.replace("gpus: 2", "gpus: 0"))
    assert str(e.value) == "cluster spec: nodes[0].gpus: expected a positive integer, got 0"
    with pytest.raises(ClusterSpecError) as e:
        parse_tiresias_csv(HEADER)
    assert str(e.value) == "cluster spec: expected exactly one data row, got 0"
    spec = ClusterSpec(gpu_types={"A": GpuTypeSpec()}, nodes=[NodeGroupSpec(gpu_type="B", gpus=1)])
    with pytest.raises(ClusterSpecError) as e:
        cluster_from_spec(spec)
    assert str(e.value) == "cluster spec: nodes[0].gpu_type: unknown GPU type 'B'; defined: A"


def test_a_value_of_another_type_is_shown_as_written():
    """YAML reads 2024-01-02 as a date: the message shows it as the user wrote it, not as Python's repr."""
    assert _err(BASE.replace("gpus: 2", "gpus: 2024-01-02")) == \
        "c.yaml: nodes[0].gpus: expected a positive integer, got 2024-01-02"
    assert _err(BASE.replace("gpus: 2", "gpus: [1, 'x']")) == \
        "c.yaml: nodes[0].gpus: expected a positive integer, got [1, 'x']"

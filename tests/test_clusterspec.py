"""Cluster specs: the bundled examples load; every mistake is one line naming file and field."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from coddl.cli.cluster import app, render_cluster
from coddl.clusterspec import ClusterSpecError, load_cluster

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "clusters"
TIRESIAS = ROOT / "src" / "coddl" / "data" / "traces" / "tiresias"

MIXED = """\
gpu_types:
  V100: {speed: 1.0, memory_gb: 32}
  K80: {speed: 0.25, memory_gb: 12}
nodes:
  - {count: 2, gpu_type: V100, gpus: 8}
  - {count: 2, gpu_type: K80, gpus: 4}
"""


def write(tmp_path: Path, text: str, name: str = "mixed.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("name, gpus, nodes, types", [
    ("homogeneous-64", 64, 8, {"V100": 64}),
    ("mixed", 96, 12, {"V100": 32, "P100": 32, "K80": 32}),
    ("philly-512", 512, 64, {"V100": 512}),
    ("pollux-t4", 64, 16, {"T4": 64}),
])
def test_bundled_examples_load(name, gpus, nodes, types):
    c = load_cluster(EXAMPLES / f"{name}.yaml")
    assert c.total_gpus == gpus and len(c.nodes) == nodes and c.capacity_by_type == types


def test_yaml_spec_builds_nodes_types_links_and_switches(tmp_path):
    text = MIXED + "nodes_per_switch: 3\nlinks: {inter_node_gbps: 25, inter_node_latency_us: 8}\n"
    c = load_cluster(str(write(tmp_path, text)))
    assert [n.gpus for n in c.nodes] == [8, 8, 4, 4]
    assert [n.name for n in c.nodes] == ["n0", "n1", "n2", "n3"]
    assert [n.switch for n in c.nodes] == ["switch0", "switch0", "switch0", "switch1"]
    assert c.gpu_types["K80"].speed == 0.25 and c.gpu_types["V100"].memory_gb == 32
    assert c.links.inter_node_gbps == 25 and c.links.intra_node_gbps == 100.0


def test_the_largest_cluster_allowed_loads(tmp_path):
    c = load_cluster(write(tmp_path, MIXED.replace("count: 2, gpu_type: K80, gpus: 4", "count: 262140, gpu_type: K80, gpus: 4")
                           .replace("gpus: 8}", "gpus: 8, cpus: 65536}")))
    assert c.total_gpus == 2**20 and c.nodes[0].cpus == 65536


@pytest.mark.parametrize("edit, message", [
    (("gpus: 4}", "gpus: -2}"), "mixed.yaml: nodes[1].gpus: expected a positive integer, got -2"),
    (("gpus: 4}", "gpus: four}"), "mixed.yaml: nodes[1].gpus: expected a positive integer, got 'four'"),
    (("gpus: 4}", "gpus: 4, gpu: 1}"), "mixed.yaml: nodes[1].gpu: unknown field"),
    (("gpu_type: K80, ", ""), "mixed.yaml: nodes[1].gpu_type: missing required field"),
    (("speed: 0.25", "speed: 0"), "mixed.yaml: gpu_types.K80.speed: expected a positive number, got 0"),
    (("gpu_type: K80", "gpu_type: A100"), "mixed.yaml: nodes[1].gpu_type: unknown GPU type 'A100'; defined: V100, K80"),
    (("nodes:", "nodes_per_switch: true\nnodes:"), "mixed.yaml: nodes_per_switch: expected a positive integer, got True"),
    # sizes past any cluster are mistakes, refused before a node is built (1e20 nodes took forever,
    # 1e11 GPUs per node asked numpy for 16 TiB)
    (("count: 2, gpu_type: K80", "count: 99999999999999999999, gpu_type: K80"),
     "mixed.yaml: nodes[1].count: expected at most 1048576, got 99999999999999999999"),
    (("gpus: 4}", "gpus: 65537}"), "mixed.yaml: nodes[1].gpus: expected at most 65536, got 65537"),
    (("gpus: 4}", "gpus: 4, cpus: 65537}"), "mixed.yaml: nodes[1].cpus: expected at most 65536, got 65537"),
    (("count: 2, gpu_type: K80, gpus: 4", "count: 262141, gpu_type: K80, gpus: 4"),
     "mixed.yaml: nodes: 1048580 GPUs in all, more than the 1048576 a cluster may have"),
])
def test_mistakes_name_the_file_and_field(tmp_path, edit, message):
    with pytest.raises(ClusterSpecError) as e:
        load_cluster(write(tmp_path, MIXED.replace(*edit)))
    assert str(e.value) == message
    assert "\n" not in str(e.value)


def test_several_mistakes_report_the_first_and_count_the_rest(tmp_path):
    with pytest.raises(ClusterSpecError, match=r"nodes\[0\].gpus: .* \(and 1 more\)$"):
        load_cluster(write(tmp_path, MIXED.replace("gpus: 8}", "gpus: 0}").replace("gpus: 4}", "gpus: 0}")))


@pytest.mark.parametrize("text, message", [
    ("gpu_types: {}\nnodes: [\n", "mixed.yaml: line 3: not valid YAML"),
    ("- 1\n- 2\n", "mixed.yaml: expected a mapping with gpu_types and nodes, got list"),
    ("gpu_types: {V100: {}}\nnodes: []\n", "mixed.yaml: nodes: expected at least one entry"),
    ("gpu_types: {V100: {}}\n", "mixed.yaml: nodes: missing required field"),
])
def test_malformed_files(tmp_path, text, message):
    with pytest.raises(ClusterSpecError) as e:
        load_cluster(write(tmp_path, text))
    assert str(e.value).startswith(message)


def test_duplicate_group_names_and_missing_files(tmp_path):
    text = MIXED.replace("gpus: 8}", "gpus: 8, name: g}").replace("gpus: 4}", "gpus: 4, name: g}")
    with pytest.raises(ClusterSpecError, match=r"nodes\[0\].name: 'g' names more than one node group"):
        load_cluster(write(tmp_path, text))
    with pytest.raises(ClusterSpecError, match="no such file"):
        load_cluster(tmp_path / "absent.yaml")


def test_tiresias_csv_specs_are_accepted():
    c = load_cluster(TIRESIAS / "n32g4.csv")
    assert c.total_gpus == 128 and len(c.nodes) == 32 and c.nodes[0].cpus == 40
    c = load_cluster(TIRESIAS / "n160g8.csv")
    assert c.total_gpus == 1280 and len({n.switch for n in c.nodes}) == 5


def test_tiresias_csv_mistakes(tmp_path):
    header = "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
    with pytest.raises(ClusterSpecError, match=r"^spec.csv: line 2: num_gpu_p_node: expected a positive integer, got 'x'$"):
        load_cluster(write(tmp_path, header + "1,2,x,8,64\n", "spec.csv"))
    with pytest.raises(ClusterSpecError, match="missing column"):
        load_cluster(write(tmp_path, "num_switch\n1\n", "spec.csv"))


def test_render_cluster_groups_identical_nodes():
    table = render_cluster(load_cluster(EXAMPLES / "mixed.yaml"))
    assert table.row_count == 3
    console = Console(record=True, width=160)
    console.print(table)
    text = console.export_text()
    assert "K80" in text and "96 GPUs on 12 nodes, 3 switches" in text


def test_cluster_show_prints_the_spec_or_one_red_line_and_exits_2(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(app, ["show", str(EXAMPLES / "homogeneous-64.yaml")])
    assert ok.exit_code == 0 and "V100" in ok.output
    bad = runner.invoke(app, ["show", str(write(tmp_path, MIXED.replace("gpus: 4}", "gpus: -2}")))])
    assert bad.exit_code == 2
    assert "mixed.yaml: nodes[1].gpus: expected a positive integer, got -2" in bad.output
    assert "Traceback" not in bad.output

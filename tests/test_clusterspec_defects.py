"""A defect found by mutation testing of ``clusterspec.py``: a YAML error without a problem mark (PyYAML's
ReaderError, for a control character) was shown with PyYAML's own two-line text, breaking the rule
that a cluster-spec error is one line naming the file."""

from __future__ import annotations

import pytest

from coddl.clusterspec import ClusterSpecError, parse_yaml_spec


def test_a_control_character_is_one_line_naming_the_file():
    with pytest.raises(ClusterSpecError) as e:
        parse_yaml_spec("gpu_types: {V100: {}}\x01\n", "c.yaml")
    assert str(e.value) == ('c.yaml: not valid YAML (unacceptable character #x0001: special characters are not '
                            'allowed in "<unicode string>", position 21)')

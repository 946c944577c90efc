"""The docs say what the code does: the settings reference is current, and README commands exist."""

from __future__ import annotations

from pathlib import Path

from a3c_ray.commands.cli import TRAIN_FLAGS
from a3c_ray.config_docs import field_docs, markdown_table

ROOT = Path(__file__).resolve().parents[1]


def test_configuration_reference_matches_the_dataclasses() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    assert text.split("## Every field", 1)[1].strip() == markdown_table().strip(), "run `make docs`"


def test_every_config_field_has_a_docstring() -> None:
    missing = [name for name, _, _, doc in field_docs() if not doc]
    assert not missing


def test_readme_starts_with_the_two_setup_commands() -> None:
    head = (ROOT / "README.md").read_text().splitlines()[:8]
    assert any(line.startswith("make train") for line in head)
    assert any(line.startswith("make test") for line in head)


def test_named_flags_are_documented() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    for flag, (dest, _, _) in TRAIN_FLAGS.items():
        assert f"`{flag}` ({dest})" in text


def test_grafana_dashboard_charts_every_ray_metric() -> None:
    import json

    from a3c_ray.metric_names import RAY_METRICS

    dash = json.loads((ROOT / "cluster" / "grafana" / "a3c-ray-dashboard.json").read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    for name in RAY_METRICS:
        assert f"ray_{name}" in exprs, name
    assert {v["name"] for v in dash["templating"]["list"]} == {"datasource", "run"}

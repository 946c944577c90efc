"""The docs say what the code does: the settings reference is current, and README commands exist."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from a3c_ray.commands.flags import TRAIN_FLAGS
from a3c_ray.config.docs import field_docs, markdown_table

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


def load_docs_check() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_docs", ROOT / "docs/tools/check_docs.py")
    assert spec is not None and spec.loader is not None
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    return check


def test_every_command_line_in_the_docs_parses_and_every_link_resolves() -> None:
    found, checked = load_docs_check().problems()
    assert found == []
    assert checked > 40  # the check does look at the docs' commands


def test_the_docs_check_finds_a_bad_flag_and_a_missing_image_and_skips_forms(
    tmp_path: Path,
) -> None:
    check = load_docs_check()
    text = "```\na3c-ray train --nope 3\na3c-ray scale RUN --workers N\n```\n![x](gone.png)\n"
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(text)
    check.ROOT = tmp_path
    found, checked = check.problems(tmp_path)
    assert checked == 1  # the form with placeholders is left out
    assert found == [
        "README.md:5: gone.png does not exist",
        "README.md:2: `a3c-ray train --nope 3`: a3c-ray: unrecognized arguments: --nope 3",
    ]


def config_header(path: Path) -> str:
    """The comment lines a shipped config starts with."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# "))
    return " ".join(lines)


def test_every_shipped_config_names_the_doc_with_its_results_or_says_untested() -> None:
    from a3c_ray import configs

    for name in configs.names():
        header = config_header(configs.resolve(name))
        if "UNTESTED" in header:
            continue
        docs = re.findall(r"docs/[\w./-]+\.md", header)
        assert docs, (
            f"{name}.yaml: its header names no docs/*.md with its results, nor says UNTESTED"
        )
        assert any(f"{name}.yaml" in (ROOT / d).read_text() for d in docs if (ROOT / d).exists()), (
            f"{name}.yaml: none of {docs} speaks of {name}.yaml"
        )

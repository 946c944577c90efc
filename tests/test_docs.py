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
        "README.md:2: `a3c-ray train --nope 3`: unrecognized arguments: --nope 3",
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


def test_readme_is_short_with_one_results_table_that_has_a_breakout_row() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 160
    headers = [n for n, line in enumerate(lines) if line.startswith("| env | config | metric |")]
    assert len(headers) == 1, "one results table"
    columns = [c.strip() for c in lines[headers[0]].strip("|").split("|")]
    assert columns == [
        "env", "config", "metric", "agent steps", "hours", "machine", "seeds", "command",
    ]  # fmt: skip
    rows = []
    for line in lines[headers[0] + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    assert all(len(r) == len(columns) for r in rows)
    envs = [r[0] for r in rows]
    assert {"CartPole-v1", "PongNoFrameskip-v4", "BreakoutNoFrameskip-v4"} <= set(envs)


def test_changelog_names_the_version_and_is_dated_newest_first() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    project = (ROOT / "pyproject.toml").read_text().split("[project]", 1)[1].split("\n[", 1)[0]
    (version,) = re.findall(r'^version = "([^"]+)"', project, flags=re.M)
    headings = re.findall(r"^##+ .*$", text, flags=re.M)
    assert headings[0].startswith(f"## {version} (")
    dates = [d for h in headings for d in re.findall(r"\d{4}-\d{2}-\d{2}", h)]
    assert len(dates) >= 5 and dates == sorted(dates, reverse=True)


def test_the_faq_answers_the_first_questions() -> None:
    text = (ROOT / "docs" / "faq.md").read_text()
    questions = re.findall(r"^## (.*)$", text, flags=re.M)
    for words in ("-21", "how long", "gpu", "ray version", "learning nothing"):
        assert any(words in q.lower() for q in questions), words
    assert "avx512_bf16" in text and "| CPU |" in text


def test_every_experiment_log_is_dated_names_its_configs_and_is_linked() -> None:
    logs = sorted(p for p in (ROOT / "docs" / "log").glob("*.md") if p.name != "README.md")
    assert logs
    index = (ROOT / "docs" / "log" / "README.md").read_text()
    guides = " ".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    for log in logs:
        head = log.read_text().splitlines()[:12]
        assert re.match(r"^# .*\(\d{4}-\d{2}-\d{2}", head[0]), f"{log.name}: no date in its title"
        assert re.match(r"\d{4}-\d{2}-\d{2}-", log.name), f"{log.name}: not named by its date"
        assert any(line.startswith("**Config") for line in head), f"{log.name}: no **Config"
        assert f"]({log.name}" in index, f"{log.name}: not in docs/log/README.md"
        assert f"log/{log.name}" in guides, f"{log.name}: no guide links it"

"""The docs say what the code does: the settings reference is current, and README commands exist."""

from __future__ import annotations

from pathlib import Path

from a3c_ray.cli import TRAIN_FLAGS
from a3c_ray.config import field_docs, markdown_table

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

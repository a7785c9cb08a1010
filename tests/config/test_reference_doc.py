"""docs/config.md is generated from the schema and must stay in sync with it."""

from pathlib import Path

from servesim.config.reference import render


def test_config_reference_is_up_to_date():
    doc = Path(__file__).parents[2] / "docs" / "config.md"
    assert doc.read_text() == render(), "regenerate: python -m servesim.config.reference > docs/config.md"

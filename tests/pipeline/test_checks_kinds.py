"""The table of check kinds (d2lrepro.pipeline.checks.KINDS) judges exactly the kinds the
ledger's schema allows, and a check of any other kind is an error that names it."""

import pytest
import yaml

from d2lrepro.pipeline import checks, claims


def schema_kinds() -> set[str]:
    """The kinds of the schema's check definitions (each a const or an enum)."""
    definitions = yaml.safe_load(claims.SCHEMA.read_text())["$defs"]
    kinds = set()
    for ref in definitions["check"]["oneOf"]:
        kind = definitions[ref["$ref"].removeprefix("#/$defs/")]["properties"]["kind"]
        kinds |= {kind["const"]} if "const" in kind else set(kind["enum"])
    return kinds


def test_the_table_judges_exactly_the_schema_s_check_kinds():
    assert len(schema_kinds()) >= 8  # each of the schema's definitions was read
    assert set(checks.KINDS) == schema_kinds()


def test_a_check_of_an_unknown_kind_is_an_error_naming_it():
    with pytest.raises(ValueError, match="unknown check kind 'at_least'"):
        checks.apply({"kind": "at_least", "metric": "a", "bound": 1}, {"a": 2.0}.__getitem__)

"""The packaged catalogs parse to the same data with libyaml's parser (used for speed) as with PyYAML's own."""

from __future__ import annotations

import pytest
import yaml

from compiler.catalog.loader import PACKAGED_LOADER, packaged_text


@pytest.mark.parametrize("name", ["gpus.yaml", "models.yaml", "fabrics.yaml"])
def test_packaged_catalog_parses_the_same_with_both_parsers(name):
    text = packaged_text(name)
    fast, reference = yaml.load(text, Loader=PACKAGED_LOADER), yaml.load(text, Loader=yaml.SafeLoader)
    assert repr(fast) == repr(reference)  # repr: same types (1 vs 1.0) and key order, not only equal values


def test_libyaml_is_used_where_pyyaml_has_it():
    assert PACKAGED_LOADER is (yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)

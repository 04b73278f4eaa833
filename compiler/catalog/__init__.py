"""Versioned catalogs (GPUs, models, fabrics) with a source and an as_of date per entry.

Import from the submodules: `types` (entry types), `loader` (load_gpus, load_models), `params`
(count_params), `fabrics` (entry types, load_fabrics), `catalog` (Catalog, load_catalog: the one object a
compile passes around, fabrics and storage included).
"""

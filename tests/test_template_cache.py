"""The per-user template cache (compiler/template_cache.py) never changes an output and never fails a compile."""

from __future__ import annotations

import os

from compiler.targets import base
from compiler.template_cache import attach_template_cache, user_cache_dir

TEMPLATE = "slurm/train.sbatch.j2"


def _fresh_environment():
    return base.environment.__wrapped__()  # not the process-wide one the other tests render with


def _cache_files(root):
    return [p for p in root.rglob("*") if p.is_file()]


def test_a_second_environment_loads_the_compiled_template_from_the_cache(tmp_path):
    first = _fresh_environment()
    attach_template_cache(first, tmp_path)
    compiled = first.get_template(TEMPLATE)
    assert len(_cache_files(tmp_path)) == 1
    second = _fresh_environment()
    attach_template_cache(second, tmp_path)
    loaded = second.get_template(TEMPLATE)
    assert loaded.blocks.keys() == compiled.blocks.keys()
    assert len(_cache_files(tmp_path)) == 1  # read, not written again


def test_a_corrupt_cache_file_is_recompiled_not_fatal(tmp_path):
    attach_template_cache(env := _fresh_environment(), tmp_path)
    env.get_template(TEMPLATE)
    (cached,) = _cache_files(tmp_path)
    cached.write_bytes(b"\x00garbage")
    again = _fresh_environment()
    attach_template_cache(again, tmp_path)
    assert again.get_template(TEMPLATE).filename == env.get_template(TEMPLATE).filename


def test_a_cache_folder_that_cannot_be_made_is_skipped(tmp_path):
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache folder would go")
    env = _fresh_environment()
    attach_template_cache(env, blocker)
    assert env.bytecode_cache is None
    assert env.get_template(TEMPLATE).filename


def test_the_cache_folder_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert user_cache_dir() == tmp_path / "mlinfra-compile"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")
    monkeypatch.setenv("HOME", "relative-home")
    assert user_cache_dir() is None


def test_compiled_output_is_byte_identical_with_a_warm_and_a_corrupt_cache(tmp_path, monkeypatch):
    from compiler.cli import main

    plan = os.path.join(os.path.dirname(__file__), "..", "examples", "llama3-8b-pretrain.yaml")
    fresh = _fresh_environment()
    monkeypatch.setattr(base, "environment", lambda: fresh)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    outputs = []
    for run in range(3):
        if run == 2:
            for cached in _cache_files(tmp_path / "xdg"):
                cached.write_bytes(cached.read_bytes()[:10])
        out = tmp_path / f"out{run}"
        assert main([plan, "-o", str(out)]) == 0
        outputs.append({p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()})
    assert _cache_files(tmp_path / "xdg")
    assert outputs[0] == outputs[1] == outputs[2]

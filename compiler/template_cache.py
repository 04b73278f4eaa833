"""The templates' compiled code kept between runs: jinja's bytecode cache in the user's cache folder.

Jinja checks each template's source checksum on every load, and the folder is keyed by our version and by everything
of the environment that changes the compiled code, so the cache never changes an output. It saves about 20 ms of a
one-plan run. A cache that cannot be read or written is skipped: the template compiles as if there were none.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import jinja2

from . import __version__


def user_cache_dir() -> Path | None:
    """$XDG_CACHE_HOME or ~/.cache, our folder in it; None where there is no absolute home to put it in."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "mlinfra-compile") if os.path.isabs(base) else None


class _TemplateCache(jinja2.FileSystemBytecodeCache):
    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # unreadable or corrupt: compile the template as if there were no cache
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _environment_key(env: jinja2.Environment) -> str:
    options = (
        jinja2.__version__,
        env.block_start_string,
        env.block_end_string,
        env.variable_start_string,
        env.variable_end_string,
        env.comment_start_string,
        env.comment_end_string,
        env.line_statement_prefix,
        env.line_comment_prefix,
        env.trim_blocks,
        env.lstrip_blocks,
        env.newline_sequence,
        env.keep_trailing_newline,
        env.autoescape,
        env.optimized,
        env.undefined.__name__,
        sorted(env.extensions),
        sorted(env.filters),
        sorted(env.tests),
    )
    return hashlib.sha256(repr(options).encode()).hexdigest()[:16]


def attach_template_cache(env: jinja2.Environment, root: Path | None) -> None:
    """Give `env` a bytecode cache under `root` (once; nothing when root is None or cannot be created)."""
    if root is None or env.bytecode_cache is not None:
        return
    directory = root / f"templates-{__version__}-{_environment_key(env)}"
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return
    env.bytecode_cache = _TemplateCache(str(directory))

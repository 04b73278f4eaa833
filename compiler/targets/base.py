"""What every target shares: the OutputFile type, the strict jinja environment and escaping filters."""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import jinja2
import yaml

from .. import __version__, runtime
from ..resources import data_dir

if TYPE_CHECKING:
    from ..plan.resolved import ResolvedPlan


@dataclass(frozen=True)
class OutputFile:
    path: str  # relative to out/<plan>/, forward slashes
    text: str
    mode: int = 0o644


@dataclass(frozen=True)
class Target:
    """One target's registry record. `render(plan, rendered)` builds the target's files from the ResolvedPlan alone
    (`plan.deployment.files` names the paths); `rendered` maps the path of every file rendered so far (with its
    header) to that file, for a target that carries another's output (the K8s ConfigMap carrying the launcher),
    so no target imports another. `needs` names those targets: the registry lists them earlier."""

    name: str
    applies: Callable[[ResolvedPlan], bool]
    render: Callable[[ResolvedPlan, Mapping[str, OutputFile]], list[OutputFile]]
    needs: tuple[str, ...] = ()


def shell_quote(value: Any) -> str:
    """Quote one word for POSIX shells (TorchX quotes at the same boundary)."""
    return shlex.quote(str(value))


def shell_words(values: list[Any]) -> str:
    return " ".join(shlex.quote(str(v)) for v in values)


# Characters that open Markdown or HTML syntax inside a line of REPORT.md: raw HTML, comments and autolinks (`<`),
# code spans (backtick), links and images (`[`), table cells (`|`). Without an opener the rest is inert: `]`, `>`,
# `-->`, an entity (it displays a character, never makes a tag), a `javascript:` URL, an `onerror=` attribute.
# CommonMark 0.31: 2.4 backslash escapes, 6.1 code spans, 6.3 links, 6.5 autolinks, 6.6 raw HTML.
_MARKDOWN_ESCAPES = {"<": "&lt;", "`": "\\`", "[": "\\[", "|": "\\|"}
_MARKDOWN_SPECIAL = re.compile("[<`\\[|]")


def markdown_text(value: Any) -> str:
    """Any value as inert Markdown text on one line (a line break would end a list item or a table row)."""
    text = " ".join(str(value).splitlines())
    return _MARKDOWN_SPECIAL.sub(lambda m: _MARKDOWN_ESCAPES[m.group()], text)


def markdown_code(value: Any) -> str:
    """A code span holding any text: fenced by one backtick more than its longest run, padded where it begins or
    ends with one (CommonMark 6.1); inside a code span nothing is Markdown or HTML."""
    text = " ".join(str(value).splitlines())
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def yaml_scalar(value: Any) -> str:
    """A YAML flow scalar for any value: strings are always quoted, so 'on', '1e3' or ': #' stay strings."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def pbtxt_string(value: Any) -> str:
    """A protobuf text-format string literal."""
    escaped = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def dump_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


# Our own generated YAML read back (consistency checks): libyaml's safe parser where PyYAML has it, several
# times faster than the pure-Python one; the text is ours, so no positions or error messages are needed.
GENERATED_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_generated_yaml(text: str) -> Any:
    return yaml.load(text, Loader=GENERATED_YAML_LOADER)


def load_generated_yaml_documents(text: str) -> list[Any]:
    return list(yaml.load_all(text, Loader=GENERATED_YAML_LOADER))


# libyaml's emitter is several times faster than PyYAML's own but styles some scalars differently: empty, long
# or non-ASCII mapping keys, characters outside the Basic Multilingual Plane, control characters. Documents without
# those are emitted identically by both (tests/test_yaml_emitters.py compares them), so it is used only for them:
# the output never depends on whether PyYAML was built with libyaml.
_LIBYAML_DUMPER = getattr(yaml, "CSafeDumper", None)
_PLAIN_KEY = re.compile(r"[\x20-\x7e]{1,99}")
_PLAIN_TEXT = re.compile(r"[\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd]*")


def plain_yaml_data(node: Any) -> bool:
    """True when every key is a short printable-ASCII string and every string value printable BMP text."""
    if isinstance(node, str):
        return _PLAIN_TEXT.fullmatch(node) is not None
    if isinstance(node, dict):
        return all(isinstance(k, str) and _PLAIN_KEY.fullmatch(k) and plain_yaml_data(v) for k, v in node.items())
    if isinstance(node, list):
        return all(plain_yaml_data(v) for v in node)
    return node is None or isinstance(node, (bool, int, float))


def _dump_yaml(document: dict, dumper) -> str:
    return yaml.dump(
        document, Dumper=dumper, sort_keys=False, default_flow_style=False, width=1 << 30, allow_unicode=True
    )


def dump_yaml_documents(documents: list[dict]) -> str:
    """Several YAML documents; keys keep the order they were built in (kind, metadata, spec read best)."""
    fast = _LIBYAML_DUMPER is not None and all(plain_yaml_data(d) for d in documents)
    return "---\n".join(_dump_yaml(d, _LIBYAML_DUMPER if fast else yaml.SafeDumper) for d in documents)


class _PackageLoader(jinja2.BaseLoader):
    """Templates from the installed package (compiler/templates, mapped from the repo's templates/)."""

    def get_source(self, environment: jinja2.Environment, template: str):
        path = data_dir("templates").joinpath(*template.split("/"))
        if not path.is_file():
            raise jinja2.TemplateNotFound(template)
        return path.read_text(encoding="utf-8"), None, lambda: True


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=_PackageLoader(),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["sh"] = shell_quote
    env.filters["sh_words"] = shell_words
    env.filters["yaml"] = yaml_scalar
    env.filters["pbtxt"] = pbtxt_string
    env.filters["md"] = markdown_text
    env.filters["md_code"] = markdown_code
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)


@cache
def runtime_script(name: str) -> str:
    """A script of compiler/runtime/ as the generated folder carries it: shipped text, settings passed as data."""
    return resources.files(runtime).joinpath(name).read_text(encoding="utf-8")


COMMENT_SYNTAX = {
    ".sh": "#",
    ".sbatch": "#",
    ".yaml": "#",
    ".yml": "#",
    ".pbtxt": "#",
    ".py": "#",
    ".toml": "#",
    ".txt": "#",
    ".env": "#",
    ".md": "<!--",
    ".svg": "<!--",
}


def comment_text(text: str) -> str:
    """Text for a one-line comment in any syntax we emit: a character that is not printable (a line break, U+2028,
    a control or bidi character) is written as its Python escape, so it cannot end the comment."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def html_comment_text(text: str) -> str:
    """Text inside <!-- -->: no run of dashes (XML forbids '--' in a comment, and '-->' would close it)."""
    return re.sub("-{2,}", "-", comment_text(text))


def header_lines(plan_file: str, plan_name: str) -> list[str]:
    """The plan's file name comes from the user: shell-quoted for the command line, then comment-escaped."""
    return [
        comment_text(line)
        for line in (
            f"Code generated by mlinfra-compile {__version__} from {plan_file} (plan '{plan_name}'). DO NOT EDIT.",
            f"Regenerate: mlinfra-compile {shell_quote(plan_file)} -o <out>",
        )
    ]


def with_header(file: OutputFile, plan_file: str, plan_name: str) -> OutputFile:
    """Prefix the generated-code header in the file's own comment syntax (after a shebang)."""
    suffix = "." + file.path.rsplit(".", 1)[-1] if "." in file.path else ""
    syntax = COMMENT_SYNTAX.get(suffix)
    if syntax is None:  # JSON cannot hold comments: the manifest lists it instead
        return file
    lines = header_lines(plan_file, plan_name)
    if syntax == "<!--":
        block = "<!-- " + html_comment_text(" ".join(lines)) + " -->\n"
    else:
        block = "".join(f"# {line}\n" for line in lines)
    text = file.text
    if text.startswith("#!"):
        shebang, _, rest = text.partition("\n")
        text = f"{shebang}\n{block}{rest}"
    else:
        text = block + text
    return OutputFile(file.path, text, file.mode)


SIGNIFICANT_DIGITS = 6  # enough for any sizing figure; hides last-bit float noise between platforms


def stable(value: Any) -> Any:
    """Floats rounded to SIGNIFICANT_DIGITS, recursively, so output bytes do not depend on float noise."""
    if isinstance(value, float):
        if not math.isfinite(value) or value == 0:
            return value
        digits = SIGNIFICANT_DIGITS - 1 - math.floor(math.log10(abs(value)))
        rounded = round(value, digits)
        return int(rounded) if rounded.is_integer() and abs(rounded) < 2**53 else rounded
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [stable(v) for v in value]
    return value

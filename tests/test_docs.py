"""docs/: generated pages equal what their generators write now, README's links lead somewhere, README's plan is
the starter `init` writes, and the site's navigation names pages that exist."""

import re

import pytest
import yaml

from compiler import docs
from compiler.init_plan import STARTER
from tests.conftest import REPO

DOCS = REPO / "docs"
# Pages other topics document; the navigation lists them, and they are checked once they exist.
PAGES_OF_OTHER_TOPICS = {
    "recipe.md",
    "megatron.md",
    "kubernetes-and-slurm.md",
    "safety.md",
    "probe.md",
    "numbers.md",
    "architecture-training.md",
}
REGENERATE = "stale: run `python scripts/generate_docs.py` and commit the result"


@pytest.mark.parametrize("name, text", sorted(docs.pages().items()))
def test_generated_page_is_current(name, text):
    assert (DOCS / name).read_text(encoding="utf-8") == text, f"docs/{name} is {REGENERATE}"


@pytest.mark.parametrize("name, text", sorted(docs.schemas().items()))
def test_committed_schema_is_current(name, text):
    assert (REPO / "schemas" / name).read_text(encoding="utf-8") == text, f"schemas/{name} is {REGENERATE}"


@pytest.mark.slow
def test_accuracy_page_is_current():
    from benchmarks.accuracy_page import accuracy_page

    assert (DOCS / "accuracy.md").read_text(encoding="utf-8") == accuracy_page(), f"docs/accuracy.md is {REGENERATE}"


def test_every_target_has_a_page():
    from compiler.targets import TARGETS

    assert {f"targets/{t.name}.md" for t in TARGETS} < set(docs.pages())


def _links(markdown: str) -> list[str]:
    return [link for link in re.findall(r"\]\(([^)#\s]+)", markdown) if "://" not in link]


def test_readme_links_lead_to_files():
    readme = (REPO / "README.md").read_text()
    missing = [
        link
        for link in _links(readme)
        if not (REPO / link).exists() and link.split("/")[-1] not in PAGES_OF_OTHER_TOPICS
    ]
    assert missing == []


def test_docs_links_lead_to_files():
    missing = []
    for page in DOCS.rglob("*.md"):
        for link in _links(page.read_text()):
            if not (page.parent / link).exists() and link.split("/")[-1] not in PAGES_OF_OTHER_TOPICS:
                missing.append(f"{page.relative_to(REPO)} -> {link}")
    assert missing == []


def test_navigation_names_pages_that_exist():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())

    def pages(entries):
        for entry in entries:
            for value in entry.values():
                yield from pages(value) if isinstance(value, list) else [value]

    nav = list(pages(config["nav"]))
    missing = [p for p in nav if not (DOCS / p).exists() and p not in PAGES_OF_OTHER_TOPICS]
    assert nav and missing == []
    unlisted = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")} - set(nav)
    assert {p for p in unlisted if not p.startswith("targets/")} == set()


def test_readme_plan_is_the_starter_plan_init_writes():
    readme = (REPO / "README.md").read_text()
    block = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert block == STARTER.read_text()


def test_readme_stays_a_front_door():
    assert len((REPO / "README.md").read_text().splitlines()) <= 250


def test_every_plan_field_has_a_description():
    rows = [line.split(" | ") for line in docs.plan_reference().splitlines() if line.startswith("| `")]
    undocumented = [row[0] for row in rows if not row[2].strip()]
    assert rows and undocumented == []


PROCESS_WORDS = re.compile(r"\(issues? #?\d+|\bissues? #?\d+\b(?!\))|\bsession \d+\b", re.IGNORECASE)


def test_no_process_words_in_code_templates_or_docs():
    """Numbered issues mean nothing to a reader of the code or of a generated file ("(issue 18)" once reached
    REPORT.md); a citation of another project's tracker ("pre-commit issue #3502") names its project first."""
    roots = ["compiler", "templates", "benchmarks", "scripts", "docs", "tests"]
    found = []
    for root in roots:
        for path in (REPO / root).rglob("*"):
            if path.suffix not in (".py", ".j2", ".md", ".yaml", ".yml") or "__snapshots__" in path.parts:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                if PROCESS_WORDS.search(re.sub(r"[\w.-]+ issue #?\d+", "", line)) and path.name != "test_docs.py":
                    found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert found == []


@pytest.mark.realtool
@pytest.mark.slow
def test_mkdocs_builds_the_site_without_a_broken_link(tmp_path):
    """docs/ as a static site (mkdocs-material): every page builds and every link resolves, but for the pages other
    topics document."""
    import os
    import subprocess

    from tests.tools.realtools import tool_python

    python = tool_python("docs")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [str(python), "-m", "mkdocs", "build", "-f", str(REPO / "mkdocs.yml"), "-d", str(tmp_path / "site")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    unexpected = [w for w in warnings if not any(f"'{p}'" in w or f"/{p}'" in w for p in PAGES_OF_OTHER_TOPICS)]
    assert unexpected == [] and (tmp_path / "site/plan-reference/index.html").is_file()

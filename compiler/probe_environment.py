"""The probe's environment checks: the node's GPU name, power limit and driver against what the plan assumed.

Standard library only: `mlinfra-compile probe` ships this file beside probe.py (the probe imports it on the node and
writes its warnings into the results), and `mlinfra-compile calibrate` runs the same checks on the results it reads.
"""

from __future__ import annotations

# The enforced limit equals the board's TDP unless an administrator capped it (`nvidia-smi -pl`); 5% absorbs
# nvidia-smi's rounding and boards whose default sits a little under the datasheet figure.
POWER_TOLERANCE = 0.05
# NVIDIA, CUDA Compatibility, "Minor Version Compatibility", Table 1: the least driver a CUDA major's toolkits run on.
MINIMUM_DRIVER_MAJOR = {"11": 450, "12": 525, "13": 580}


def parse_nvidia_smi(line: str) -> dict:
    """`nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader` of one GPU: name, driver and
    power limit in watts ({} when the line is empty or not that shape)."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 3 or not parts[0]:
        return {}
    watts = parts[2].split()[0] if parts[2] else ""
    try:
        power = float(watts)
    except ValueError:
        power = None  # "[N/A]" on boards that do not report it
    return {"gpu_name": parts[0], "driver": parts[1], "power_limit_watts": power}


def _words(name: str) -> str:
    return name.replace("-", " ").lower()


def environment_warnings(environment: dict, expected: dict) -> list[str]:
    """What differs from the plan's GPU catalog entry (`expected`: device, the nvidia.com/gpu.product label; power_watts,
    its TDP; gpu_id): another GPU, another power limit, a driver too old for the CUDA that torch was built with. A CPU
    run records none of these, so it has no warnings."""
    if environment.get("device") != "cuda":
        return []
    warnings = []
    smi = parse_nvidia_smi(str(environment.get("nvidia_smi") or ""))
    name = str(environment.get("gpu_name") or smi.get("gpu_name", ""))
    if name and _words(expected["device"]) not in _words(name):
        warnings.append(
            f"GPU: this node has {name!r}, the plan assumed {expected['gpu_id']} ({expected['device']}); "
            f"the measurements are of another GPU than planned"
        )
    power = smi.get("power_limit_watts")
    if power and abs(power - expected["power_watts"]) > POWER_TOLERANCE * expected["power_watts"]:
        warnings.append(
            f"power limit: {power:g} W on this node, {expected['power_watts']:g} W in the catalog for "
            f"{expected['gpu_id']}; step times measured here hold at {power:g} W"
        )
    cuda, driver = str(environment.get("cuda") or ""), smi.get("driver", "")
    least = MINIMUM_DRIVER_MAJOR.get(cuda.split(".")[0])
    try:
        major = int(driver.split(".")[0])
    except ValueError:
        major = None
    if least and major is not None and major < least:
        warnings.append(
            f"driver: {driver} is older than {least}, the least CUDA {cuda.split('.')[0]}.x runs on "
            f"(NVIDIA CUDA Compatibility, Table 1); torch was built with CUDA {cuda}"
        )
    return warnings

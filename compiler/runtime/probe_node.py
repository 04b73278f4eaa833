"""The serving probes' first and last steps on the node, shared by probe_serve.py and probe_triton.py (which import it
from beside them, as they import probe_environment.py): the command line and settings.json, the device check, the
results folder, and the results written and printed between the marker lines a Kubernetes Job's log is read by
(deployment/probe_kubernetes.py EXTRACT_COMMAND). Standard library only: `mlinfra-compile probe` ships it as it is.
"""

import argparse
import json
import os
import sys

MARK_BEGIN, MARK_END = (
    "----- mlinfra-compile probe results begin -----",
    "----- mlinfra-compile probe results end -----",
)


def arguments(here):
    """(the command line, settings.json beside the script unless --settings names another)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--settings", default=os.path.join(here, "settings.json"))
    parser.add_argument("--out", default="probe-results.json")
    parser.add_argument("--allow-other-device", action="store_true")
    parser.add_argument("--print-results", action="store_true")
    args = parser.parse_args()
    with open(args.settings, encoding="utf-8") as handle:
        return args, json.load(handle)


def checked_device(s, env, allow_other_device):
    """(what the plan expected of the node, the node's device name); exits unless the node has the plan's GPU or
    --allow-other-device."""
    expected = {"device": s["expected_device"], "power_watts": s["expected_power_watts"], "gpu_id": s["gpu_id"]}
    name = env.get("gpu_name", "cpu")
    if s["expected_device"].replace("-", " ").lower() not in name.replace("-", " ").lower() and not allow_other_device:
        sys.exit(f"probe: this node has {name!r}, the plan assumed {s['expected_device']!r}")
    return expected, name


def results_folder(out):
    """probe-results.d/ beside the results file: the engine's log and the benchmark's own files."""
    folder = os.path.join(os.path.dirname(os.path.abspath(out)), "probe-results.d")
    os.makedirs(folder, exist_ok=True)
    return folder


def write_results(results, args):
    """The results file; with --print-results also one JSON line between the marker lines, for the Job's log."""
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2, sort_keys=True)
    if args.print_results:
        print(MARK_BEGIN + "\n" + json.dumps(results, sort_keys=True) + "\n" + MARK_END, flush=True)

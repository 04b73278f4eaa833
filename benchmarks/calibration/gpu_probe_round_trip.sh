#!/usr/bin/env bash
# The round trip on the GPU results of gpu_probe_run.sh, here (no GPU needed), kept with their provenance:
#   bash benchmarks/calibration/gpu_probe_round_trip.sh OUT_DIR [MACHINE WORDS]
# copies the measured files into benchmarks/calibration/h200-probe/measured/, runs
#   mlinfra-compile calibrate probe-results.json -o site-calibration.yaml --site h200-probe
# and compiles the probed plan with that site file (cluster.calibration), keeping every command's output and exit
# status in measured/ROUND_TRIP.md.
set -u
OUT="${1:?the gpu_probe_run.sh output folder}"
MACHINE="${2:-one NVIDIA H200}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
DEST="$HERE/h200-probe/measured"
mkdir -p "$DEST/probe-results.d"
for f in environment.txt run.log microbench.json probe-results.json settings.json probe.log; do
  [ -f "$OUT/$f" ] && cp "$OUT/$f" "$DEST/$f"
done
cp "$OUT"/probe-results.d/*.json "$DEST/probe-results.d/" 2>/dev/null
for f in "$OUT"/probe-results.d/*.log; do  # the frameworks' logs: their last 200 lines
  [ -f "$f" ] && tail -200 "$f" > "$DEST/probe-results.d/$(basename "$f")"
done
cd "$DEST" || exit 1
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"  # the checkout's compiler
python3 -m compiler calibrate probe-results.json -o site-calibration.yaml --site h200-probe > calibrate.txt 2>&1
calibrate_status=$?
sed 's/^name: mistral-7b-sft$/name: mistral-7b-sft-calibrated/' ../mistral-7b-sft-h200.yaml \
  | sed 's/^  slurm: {partition: a100}$/  slurm: {partition: a100}\n  calibration: site-calibration.yaml/' > plan-calibrated.yaml
python3 -m compiler explain plan-calibrated.yaml > explain.txt 2>&1
explain_status=$?
{
  echo "# Round trip on the probe's GPU results"
  echo
  echo "Measured on $MACHINE by benchmarks/calibration/gpu_probe_run.sh; calibrate and compile run here at commit $(git -C "$REPO" log -1 --format=%h)."
  echo "Node: $(head -3 environment.txt 2>/dev/null | tr '\n' ' ')"
  echo
  echo '```'
  echo "\$ mlinfra-compile calibrate probe-results.json -o site-calibration.yaml --site h200-probe   # exit $calibrate_status"
  cat calibrate.txt
  echo "\$ mlinfra-compile explain plan-calibrated.yaml   # exit $explain_status (the probed plan with cluster.calibration)"
  grep -E "site calibration" explain.txt
  echo '```'
} > ROUND_TRIP.md
cat ROUND_TRIP.md

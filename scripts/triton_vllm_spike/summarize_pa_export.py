"""summarize_pa_export.py PROFILE_EXPORT_JSON

Tokenizer-free TTFT / inter-token latency / output-token throughput from perf_analyzer's own
--profile-export-file (the raw per-request timestamps), for a decoupled streaming Triton model where
the vLLM backend streams ("stream": true). Tokens per response: the response's num_output_tokens when the
request asked for it (return_num_output_tokens), else 1. Under load vLLM merges several tokens into one
streamed response (seen here: ' corpus tes hel' = 3 tokens in one response), so counting responses undercounts.

  TTFT            = first response timestamp - request timestamp
  ITL             = (last - first response timestamp) / (tokens after the first response), per request
  output tokens/s = all tokens / (last response of the run - first request of the run)

genai-perf prints the same metrics but counts tokens by re-tokenizing text; this cross-checks it.
"""

import json
import statistics
import sys


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


d = json.load(open(sys.argv[1]))
for exp in d["experiments"]:
    reqs = [r for r in exp["requests"] if r["response_timestamps"]]
    ttft = [(r["response_timestamps"][0] - r["timestamp"]) / 1e6 for r in reqs]
    # num_output_tokens only when asked for: perf_analyzer exports unrequested outputs as garbage numbers
    counts = [
        [int(o["num_output_tokens"]) if r["request_inputs"].get("return_num_output_tokens") else 1 for o in outs]
        for r, outs in ((r, r["response_outputs"]) for r in reqs)
    ]
    itl = [
        (r["response_timestamps"][-1] - r["response_timestamps"][0]) / 1e6 / (sum(c) - c[0])
        for r, c in zip(reqs, counts)
        if sum(c) > c[0]
    ]
    ntok = [sum(c) for c in counts]
    nresp = [len(r["response_timestamps"]) for r in reqs]
    t0 = min(r["timestamp"] for r in reqs)
    t1 = max(r["response_timestamps"][-1] for r in reqs)
    dur = (t1 - t0) / 1e9
    print(
        f"{exp['experiment']['mode']}={exp['experiment']['value']}: requests={len(reqs)} "
        f"tokens/request={statistics.mean(ntok):.1f} (min {min(ntok)}, max {max(ntok)}) "
        f"responses/request={statistics.mean(nresp):.1f}"
    )
    print(f"  TTFT ms: mean {statistics.mean(ttft):.1f}  p50 {pct(ttft, 50):.1f}  p99 {pct(ttft, 99):.1f}")
    print(f"  ITL  ms: mean {statistics.mean(itl):.2f}  p50 {pct(itl, 50):.2f}  p99 {pct(itl, 99):.2f}")
    print(f"  output tokens/s: {sum(ntok) / dur:.1f}   requests/s: {len(reqs) / dur:.2f}   over {dur:.2f} s")

"""tgi/launcher.sh: the text-generation-launcher arguments, their quoting, and TGI's documented CLI and rules.

No TGI binary can be installed here (Rust + CUDA; crates.io is unreachable), so the arguments are checked against
the launcher's own reference, kept in tests/data/tgi/launcher_args.json: every flag name, value type and accepted
value as `text-generation-launcher --help` prints them, plus the cross-argument rules of launcher/src/main.rs and
router/src/main.rs (the same error strings). The checker below is a stand-in for clap, not TGI itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compiler.targets import tgi
from tests.fixtures.resolved_plans import deployed
from tests.test_target_vllm import (
    by_path,
    fake_calls,
    fake_commands,
    llama_70b_fp8,
    llama_405b_two_nodes,
    llm_plan,
    run_script,
    shellcheck_ok,
    write_tree,
)

LAUNCHER = json.loads((Path(__file__).resolve().parent / "data" / "tgi" / "launcher_args.json").read_text())


def launcher_errors(words: list[str]) -> list[str]:
    """What clap and TGI's argument validation would refuse in `--flag=value` words."""
    errors, values = [], {}
    for word in words:
        name, sep, value = word[2:].partition("=")
        kind = LAUNCHER["args"].get(name)
        if not word.startswith("--") or kind is None:
            errors.append(f"unexpected argument '{word}'")
            continue
        if kind == "flag":
            if sep:
                errors.append(f"--{name} takes no value")
        elif not sep:
            errors.append(f"--{name} needs a value")
        elif isinstance(kind, list) and value not in kind:
            errors.append(f"invalid value '{value}' for '--{name}': possible values {kind}")
        elif kind == "int" and not value.isdigit():
            errors.append(f"invalid digit in '{value}' for '--{name}'")
        elif kind == "float":
            try:
                float(value)
            except ValueError:
                errors.append(f"invalid float '{value}' for '--{name}'")
        values[name] = value
    num = {k: int(v) for k, v in values.items() if LAUNCHER["args"].get(k) == "int" and v.isdigit()}
    if "max-input-tokens" in num and "max-total-tokens" in num and num["max-input-tokens"] >= num["max-total-tokens"]:
        errors.append("`max_input_tokens` must be < `max_total_tokens`")
    if (
        "max-input-tokens" in num
        and "max-batch-prefill-tokens" in num
        and num["max-batch-prefill-tokens"] < num["max-input-tokens"]
    ):
        errors.append("`max_batch_prefill_tokens` must be >= `max_input_tokens`")
    if "max-batch-total-tokens" in num and num.get("max-total-tokens", 0) > num["max-batch-total-tokens"]:
        errors.append("`max_total_tokens` must be <= `max_batch_total_tokens`")
    if "dtype" in values and "quantize" in values:
        errors.append("--dtype cannot be used with --quantize")
    return errors


def tgi_plan(**updates):
    return llm_plan("tgi", **updates)


def words_of(plan) -> dict[str, str]:
    return dict(w[2:].split("=", 1) for w in tgi.launcher_words(plan))


# --- numbers in the right places ------------------------------------------------------------------


def test_applies_only_to_tgi_serving():
    assert tgi.applies(tgi_plan())
    assert not tgi.applies(llm_plan("vllm"))


def test_launcher_carries_the_sized_numbers():
    words = words_of(tgi_plan())
    assert words == {
        "model-id": "meta-llama/Llama-3.1-8B-Instruct",
        "hostname": "0.0.0.0",
        "port": "8000",
        "num-shard": "1",
        "max-total-tokens": "8192",
        "max-input-tokens": "8191",
        "max-batch-prefill-tokens": "8241",  # max(8192 sized, 8191 + 50)
        "max-concurrent-requests": "72",  # batch 64 + 2 × queue target 4
        "dtype": "bfloat16",
    }


def test_prefill_budget_keeps_a_larger_sized_chunk():
    assert words_of(tgi_plan(max_num_batched_tokens=16384))["max-batch-prefill-tokens"] == "16384"


def test_quantized_precisions():
    fp8 = words_of(llama_70b_fp8("tgi"))
    assert (fp8["quantize"], fp8["kv-cache-dtype"], fp8["num-shard"]) == ("fp8", "fp8_e4m3fn", "4")
    assert "dtype" not in fp8  # the launcher refuses --dtype with --quantize
    assert words_of(tgi_plan(precision="int8"))["quantize"] == "eetq"
    assert words_of(tgi_plan(precision="int4"))["quantize"] == "bitsandbytes-nf4"
    assert words_of(tgi_plan(precision="fp16"))["dtype"] == "float16"


def test_refuses_what_tgi_cannot_serve():
    with pytest.raises(ValueError, match="not fp32"):
        tgi.render(tgi_plan(precision="fp32"))
    plan = llama_405b_two_nodes()
    with pytest.raises(ValueError, match="one node"):
        tgi.render(deployed(plan.model_copy(update={"serving": plan.serving.model_copy(update={"engine": "tgi"})})))


# --- TGI's documented CLI and rules ----------------------------------------------------------------


@pytest.mark.parametrize(
    "make_plan",
    [
        tgi_plan,
        lambda: llama_70b_fp8("tgi"),
        lambda: tgi_plan(precision="int4"),
        lambda: tgi_plan(max_num_batched_tokens=512, context_len=32768),
    ],
    ids=["bf16", "fp8", "int4", "small-chunk-long-context"],
)
def test_arguments_pass_the_launcher_reference(make_plan):
    assert launcher_errors(tgi.launcher_words(make_plan())) == []


def test_reference_rejects_wrong_arguments():
    good = tgi.launcher_words(tgi_plan())
    assert launcher_errors([*good, "--num-shards=2"]) == ["unexpected argument '--num-shards=2'"]
    assert launcher_errors([*good, "--quantize=int4"])[0].startswith("invalid value 'int4' for '--quantize'")
    assert "`max_batch_prefill_tokens` must be >= `max_input_tokens`" in launcher_errors(
        [w for w in good if not w.startswith("--max-batch-prefill-tokens")] + ["--max-batch-prefill-tokens=4096"]
    )
    assert "--dtype cannot be used with --quantize" in launcher_errors([*good, "--quantize=fp8"])


# --- the script -----------------------------------------------------------------------------------


def test_launcher_sh_runs_text_generation_launcher(tmp_path):
    plan = tgi_plan(serve={"prefix_caching": False})
    out = write_tree(tgi.render(plan), tmp_path / "out", plan)
    assert by_path(tgi.render(plan))["tgi/launcher.sh"].mode == 0o755
    env = fake_commands(
        tmp_path / "bin",
        "text-generation-launcher",
        script='printf "%s\\0" "$(basename "$0")" "PREFIX_CACHING=$PREFIX_CACHING" "$@" >>"$FAKE_LOG"; printf "\\n" >>"$FAKE_LOG"\n',
    )
    assert run_script(out / "tgi/launcher.sh", env, "--json-output").returncode == 0
    assert fake_calls(env) == [
        ["text-generation-launcher", "PREFIX_CACHING=0", *tgi.launcher_words(plan), "--json-output"]
    ]


def test_hostile_model_location_reaches_the_launcher_verbatim(tmp_path):
    marker = tmp_path / "pwned"
    weights = f"/m/a'b\"c $(touch {marker}) `touch {marker}` ; touch {marker} #"
    plan = tgi_plan()
    plan = deployed(plan.model_copy(update={"model": plan.model.model_copy(update={"weights_uri": weights})}))
    out = write_tree(tgi.render(plan), tmp_path / "out", plan)
    env = fake_commands(tmp_path / "bin", "text-generation-launcher")
    assert run_script(out / "tgi/launcher.sh", env).returncode == 0
    assert fake_calls(env)[0][1] == f"--model-id={weights}"
    assert not marker.exists()


def test_bash_syntax_and_shellcheck(tmp_path):
    plan = llama_70b_fp8("tgi")
    shellcheck_ok(write_tree(tgi.render(plan), tmp_path, plan) / "tgi/launcher.sh")

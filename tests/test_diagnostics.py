"""Invalid plans give located, coded diagnostics (snapshotted), exit 2, and never a traceback."""

from pathlib import Path

import pytest

INVALID = sorted((Path(__file__).parent / "invalid_plans").glob("*.yaml"))


@pytest.mark.parametrize("plan", INVALID, ids=lambda p: p.stem)
def test_invalid_plan_is_a_located_diagnostic(plan, cli, snapshot_text):
    result = cli(plan.relative_to(Path(__file__).parent.parent), "-o", "/nonexistent-never-written")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert snapshot_text(result.stderr)


def test_all_errors_of_a_file_are_reported_sorted_by_position(cli):
    result = cli("tests/invalid_plans/bad-quantities.yaml")
    lines = [l for l in result.stderr.splitlines() if ": error: " in l]
    positions = [tuple(int(x) for x in l.split(":")[1:3]) for l in lines]
    assert len(lines) == 5
    assert positions == sorted(positions)
    assert (
        "tests/invalid_plans/bad-quantities.yaml:6:11: error: train.tokens: expected a count like '7B', '2T' or '2e12', got 'lots'  [invalid-quantity]"
        in lines
    )


def test_unknown_gpu_gets_did_you_mean(cli):
    result = cli("tests/invalid_plans/unknown-names.yaml")
    assert "cluster.gpus.0: unknown GPU 'h100-sxm' (did you mean 'h100-sxm-80gb'?)  [unknown-gpu]" in result.stderr
    assert "model.preset: unknown model preset 'llama-3-8b' (did you mean" in result.stderr


def test_unknown_key_points_at_the_key_with_a_suggestion(cli):
    result = cli("tests/invalid_plans/unknown-keys.yaml")
    assert (
        ":8:3: error: train.optimiser: unknown key 'optimiser' (did you mean 'optimizer'?)  [unknown-key]"
        in result.stderr
    )
    assert ":11:3: error: cluster.schedular: unknown key 'schedular' (did you mean 'scheduler'?)" in result.stderr


def test_huge_file_is_refused_unread(tmp_path, cli):
    plan = tmp_path / "huge.yaml"
    plan.write_bytes(b"# " + b"x" * (50 * 2**20) + b"\nname: x\n")
    result = cli(plan)
    assert result.returncode == 2
    assert "[file-too-large]" in result.stderr


def test_a_huge_quantity_is_not_echoed_whole(cli, tmp_path):
    plan = tmp_path / "big.yaml"
    plan.write_text(
        "name: big\nworkload: train\nmodel: {params: " + "9" * 400 + "}\n"
        "train: {tokens: 1T, seq_len: 2048, global_batch_tokens: 4M}\ncluster: {gpus: [h100-sxm-80gb]}\n"
    )
    result = cli(plan, "-o", str(tmp_path / "out"))
    error = next(l for l in result.stderr.splitlines() if ": error: " in l)
    assert result.returncode == 2 and "[invalid-quantity]" in error
    assert error.count("9") < 80 and "9..." in error

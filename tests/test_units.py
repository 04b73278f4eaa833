import pytest

from compiler import units


@pytest.mark.parametrize(
    "text, expected",
    [("7B", 7e9), ("70e9", 70e9), ("1.5T", 1.5e12), ("4M", 4e6), ("8k", 8e3), (512, 512), ("1_000", 1000)],
)
def test_counts(text, expected):
    assert units.parse_count(text) == pytest.approx(expected)


def test_binary_and_decimal_bytes_are_not_confused():
    assert units.parse_bytes("80GiB") == 80 * 2**30
    assert units.parse_bytes("80GB") == 80 * 10**9
    assert units.parse_bytes("80GiB") - units.parse_bytes("80GB") == 5_899_345_920


@pytest.mark.parametrize(
    "text, seconds", [("30d", 2_592_000), ("2h", 7200), ("150ms", 0.15), ("2s", 2), ("1w", 604800), (45, 45)]
)
def test_durations(text, seconds):
    assert units.parse_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text, usd", [("$400k", 400_000), ("400k", 400_000), ("400000", 400_000), ("$1.2M", 1_200_000)]
)
def test_dollars(text, usd):
    assert units.parse_usd(text) == pytest.approx(usd)


@pytest.mark.parametrize("bad", ["lots", "7X", "-5", "nan", "inf", True, None, "1e999", ""])
def test_garbage_is_refused_with_what_was_expected(bad):
    with pytest.raises(units.QuantityError) as err:
        units.parse_count(bad)
    assert "expected a count" in str(err.value)

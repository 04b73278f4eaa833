"""Report charts: well-formed SVG placing the numbers, and a real headless chromium renders them non-blank."""

import struct
import xml.etree.ElementTree as ET
import zlib

from compiler.targets import chart_axes, charts, report
from tests.fixtures.resolved_plans import serving_plan, training_plan
from tests.tools.realtools import render_svg_png


def png_pixels(data: bytes) -> bytes:
    """The decompressed scanlines of a PNG (enough to tell a blank image from a drawn one)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    return zlib.decompress(idat)


def test_memory_chart_places_each_term_and_the_capacity_line():
    svg = charts.memory_bar([("weights", 16 * 2**30), ("kv_cache", 52 * 2**30)], 72 * 2**30, "t")
    root = ET.fromstring(svg)
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "weights: 16.0 GiB" in texts and "kv_cache: 52.0 GiB" in texts and "usable 72.0 GiB" in texts


def test_hostile_labels_are_escaped_in_svg():
    axis = chart_axes.Axis("x", chart_axes.usd_unit)
    svg = charts.pareto([charts.Point("<script>alert(1)</script> & co", 1.0, 2.0, True)], axis, axis, "t")
    ET.fromstring(svg)  # still well-formed
    assert "<script>" not in svg


def test_report_charts_render_non_blank_in_headless_chromium(tmp_path):
    for plan in (training_plan(), serving_plan()):
        for f in report.render(plan):
            if not f.path.endswith(".svg"):
                continue
            svg = tmp_path / f.path.replace("/", "_")
            svg.write_text(f.text)
            png = svg.with_suffix(".png")
            render_svg_png(svg, png)
            pixels = png_pixels(png.read_bytes())
            assert len(set(pixels)) > 8, f"{f.path} rendered blank"


def _boxes_overlap(a: dict, b: dict) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


def test_example_charts_keep_every_label_inside_the_canvas_in_chromium(tmp_path):
    """Laid out by a real browser: every text inside the SVG, tick values on both axes, no two labels on top
    of each other (the 'chosen' label used to be clipped at the right edge; points were tooltips only)."""
    from compiler.pipeline import compile_plan
    from tests.conftest import EXAMPLES
    from tests.tools.realtools import svg_text_boxes

    for example in EXAMPLES:
        for f in compile_plan(example).files:
            if not f.path.endswith(".svg"):
                continue
            laid_out = svg_text_boxes(f.text.split("\n", 1)[1], tmp_path)  # without the XML comment header
            boxes = [b for b in laid_out["boxes"] if b["text"].strip()]
            for b in boxes:
                assert b["x"] >= 0 and b["y"] >= 0, (example.name, f.path, b)
                assert b["x"] + b["width"] <= laid_out["width"] and b["y"] + b["height"] <= laid_out["height"], (
                    example.name,
                    f.path,
                    b,
                )
            overlapping = [
                (a["text"], b["text"]) for i, a in enumerate(boxes) for b in boxes[i + 1 :] if _boxes_overlap(a, b)
            ]
            assert overlapping == [], (example.name, f.path, overlapping)
            if f.path.endswith("pareto.svg") and "no alternatives" not in f.text:
                texts = [b["text"] for b in boxes]
                assert sum(t.startswith("$") for t in texts) >= 3, texts  # cost tick values
                assert sum(t.endswith((" d", " h", " min", " s", " ms")) for t in texts) >= 3, texts  # time tick values
                assert any(t.startswith("1. ") for t in texts)  # the legend names every point


def test_ticks_are_round_numbers_in_the_display_unit():
    assert chart_axes.nice_ticks(172.6, 175.8) == [172.0, 173.0, 174.0, 175.0, 176.0]
    assert chart_axes.tick_text(16.5 * 86400, chart_axes.seconds_unit(30 * 86400), 0.5 * 86400) == "16.5 d"
    assert chart_axes.axis_range([173_000, 175_400])[0] > 170_000  # zero-free when the spread is small
    assert chart_axes.axis_range([1.0, 30.0])[0] == 0.0


SVG = "{http://www.w3.org/2000/svg}"


def _texts(svg: str) -> list[str]:
    return [t.text or "" for t in ET.fromstring(svg).iter(f"{SVG}text")]


def _compiled(example: str) -> dict[str, str]:
    from compiler.pipeline import compile_plan
    from tests.conftest import REPO

    return {f.path: f.text for f in compile_plan(REPO / "examples" / f"{example}.yaml").files}


def test_every_point_has_its_whiskers_and_the_gate_names_its_quantile():
    """llama3-8b-pretrain: the options at P50 with P10-P90 whiskers on cost and time, and the deadline and budget
    lines say they are checked at P90 (so a point left of the budget line at P50 can still be rejected visibly)."""
    svg = _compiled("llama3-8b-pretrain")["charts/pareto.svg"]
    root = ET.fromstring(svg)
    points = len(list(root.iter(f"{SVG}circle")))
    whiskers = [line for line in root.iter(f"{SVG}line") if line.get("stroke-width") == "1.5"]
    assert points >= 3 and len(whiskers) == 2 * points
    texts = _texts(svg)
    assert any(t.startswith("deadline 30 d (checked at P90)") for t in texts), texts
    assert any(t.startswith("budget $450k (checked at P90)") for t in texts), texts
    assert any("whiskers P10–P90" in t for t in texts)


def test_a_serving_plan_is_charted_on_the_slo_quantities():
    """An LLM service's SLO names TTFT and TPOT: one chart on each, each with its SLO line, not request latency."""
    files = _compiled("llama3-70b-fp8-slo")
    ttft, tpot = _texts(files["charts/pareto.svg"]), _texts(files["charts/pareto-tpot.svg"])
    assert "TTFT p99 at peak" in ttft and any(t.startswith("TTFT SLO 2") for t in ttft), ttft
    assert "TPOT p99 at peak" in tpot and any(t.startswith("TPOT SLO 50 ms") for t in tpot), tpot
    report = files["REPORT.md"]
    assert "![charts/pareto.svg](charts/pareto.svg)" in report and "(charts/pareto-tpot.svg)" in report


def test_a_single_option_gets_no_scatter_and_the_report_no_broken_image():
    """mistral-7b-sft has one option: a scatter of one point says nothing, so none is written or linked."""
    files = _compiled("mistral-7b-fsdp-finetune")
    assert "charts/pareto.svg" not in files and "pareto.svg" not in files["REPORT.md"]
    assert "charts/memory.svg" in files


def test_an_axis_that_does_not_start_at_zero_carries_a_break_mark_and_one_spanning_decades_is_log():
    axis = chart_axes.Axis("cost", chart_axes.usd_unit)
    time = chart_axes.Axis("time", chart_axes.seconds_unit)
    close = [charts.Point("a", 173_000, 10.0), charts.Point("b", 175_400, 20.0)]
    marks = [
        line
        for line in ET.fromstring(charts.pareto(close, axis, time, "t")).iter(f"{SVG}line")
        if line.get("x1") != line.get("x2") and line.get("y1") != line.get("y2")
    ]
    assert len(marks) == 2  # the cost axis starts near $172k: two slashes; the time axis starts at zero
    spread = [charts.Point("a", 1.0, 3 * 86400), charts.Point("b", 2.0, 1079 * 86400)]
    texts = _texts(charts.pareto(spread, axis, time, "t"))
    assert "time (log scale)" in texts and {"10 d", "100 d", "1000 d"} <= set(texts)

"""Report charts: well-formed SVG placing the numbers, and a real headless chromium renders them non-blank."""

import struct
import xml.etree.ElementTree as ET
import zlib

from compiler.targets import charts, report
from tests.fixtures.resolved_plans import serving_plan, training_plan
from tests.tools.realtools import render_svg_png


def png_pixels(data: bytes) -> bytes:
    """The decompressed scanlines of a PNG (enough to tell a blank image from a drawn one)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8: pos + 8 + length]
        pos += 12 + length
    return zlib.decompress(idat)


def test_memory_chart_places_each_term_and_the_capacity_line():
    svg = charts.memory_bar([("weights", 16 * 2**30), ("kv_cache", 52 * 2**30)], 72 * 2**30, "t")
    root = ET.fromstring(svg)
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "weights: 16.0 GiB" in texts and "kv_cache: 52.0 GiB" in texts and "usable 72.0 GiB" in texts


def test_hostile_labels_are_escaped_in_svg():
    svg = charts.pareto([("<script>alert(1)</script> & co", 1.0, 2.0, True)], "x", "y", "t")
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

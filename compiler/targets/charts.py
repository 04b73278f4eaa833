"""SVG charts written next to REPORT.md, built as text (no plotting dependency).

Every string placed in the SVG goes through xml escaping; coordinates are rounded to 0.1 px so the
output is byte-stable.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape as _html_escape

from .chart_axes import Axis, ScaledAxis, scaled_axis


def escape(text: str) -> str:
    """Text-node escaping (&, <, >), as xml.sax.saxutils.escape does, without importing urllib/http."""
    return _html_escape(text, quote=False)


WIDTH, HEIGHT, MARGIN = 720, 360, 60
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1")


def _svg(body: list[str], title: str, height: int = HEIGHT) -> str:
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">'
    )
    return (
        "\n".join(
            [
                head,
                f"<title>{escape(title)}</title>",
                f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
                f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
                *body,
                "</svg>",
            ]
        )
        + "\n"
    )


def memory_bar(
    terms: list[tuple[str, float]],
    capacity_bytes: float,
    title: str,
    spread: tuple[float, float, float] | None = None,
    capacity_label: str = "usable",
) -> str:
    """One stacked horizontal bar of memory terms (GiB, summing to the roofline) against the usable capacity line;
    with `spread` (P10, P50, P90 of the measured ÷ predicted peaks) a whisker under it and a tick at the P50."""
    total = sum(v for _, v in terms)
    scale_max = max(total, capacity_bytes, spread[2] if spread else 0.0, 1.0) * 1.1
    plot_w = WIDTH - 2 * MARGIN
    x, y, h = float(MARGIN), 80.0, 60.0
    body = []
    for i, (name, value) in enumerate(terms):
        w = plot_w * value / scale_max
        color = PALETTE[i % len(PALETTE)]
        body.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{color}"/>')
        legend_y = 212 + 18 * i
        body.append(f'<rect x="{MARGIN}" y="{legend_y - 10}" width="12" height="12" fill="{color}"/>')
        body.append(f'<text x="{MARGIN + 18}" y="{legend_y}">{escape(name)}: {value / 2**30:.1f} GiB</text>')
        x += w
    cap_x = MARGIN + plot_w * capacity_bytes / scale_max
    body.append(
        f'<line x1="{cap_x:.1f}" y1="60" x2="{cap_x:.1f}" y2="160" stroke="#000000" stroke-width="2" stroke-dasharray="6 3"/>'
    )
    cap_text = f"{capacity_label} {capacity_bytes / 2**30:.1f} GiB"
    half = CHAR_WIDTH * len(cap_text) / 2
    text_x = min(max(cap_x, half + 8), WIDTH - 8 - half)  # centred on the line, kept inside the canvas
    body.append(f'<text x="{text_x:.1f}" y="55" text-anchor="middle">{escape(cap_text)}</text>')
    body.append(f'<text x="{MARGIN}" y="{y + h + 16:.1f}">roofline {total / 2**30:.1f} GiB per GPU</text>')
    if spread:
        low, mid, high = (MARGIN + plot_w * v / scale_max for v in spread)
        wy = y + h + 28
        body += [
            f'<line x1="{low:.1f}" y1="{wy:.1f}" x2="{high:.1f}" y2="{wy:.1f}" stroke="#e15759" stroke-width="2"/>',
            f'<line x1="{mid:.1f}" y1="{wy - 6:.1f}" x2="{mid:.1f}" y2="{wy + 6:.1f}" stroke="#e15759" stroke-width="2"/>',
        ]
        body.append(
            f'<text x="{WIDTH - MARGIN}" y="{wy + 18:.1f}" text-anchor="end" fill="#e15759">P50 '
            f"{spread[1] / 2**30:.1f} GiB, P10–P90 {spread[0] / 2**30:.1f}–{spread[2] / 2**30:.1f} GiB</text>"
        )
    return _svg(body, title)


@dataclass(frozen=True)
class Point:
    """One option: its P50 on each axis and the P10-P90 whiskers around it (equal to the P50 where unranged)."""

    label: str
    x: float
    y: float
    chosen: bool = False
    x_spread: tuple[float, float] | None = None
    y_spread: tuple[float, float] | None = None

    def xs(self) -> list[float]:
        return [self.x, *(self.x_spread or ())]

    def ys(self) -> list[float]:
        return [self.y, *(self.y_spread or ())]


def worth_drawing(points: list[Point]) -> bool:
    """A scatter says something with two options or more at different places; one point, or all on one spot, not."""
    return len({(round(p.x, 9), round(p.y, 9)) for p in points}) >= 2


LEGEND_CHARS = 100  # characters of an option's description that fit the legend line at 12 px


def _clip(text: str) -> str:
    return text if len(text) <= LEGEND_CHARS else text[: LEGEND_CHARS - 1] + "…"


CHAR_WIDTH, LINE_HEIGHT = 7.0, 14.0  # generous estimates for 12 px sans-serif, to keep labels apart


def _label_spot(cx: float, cy: float, tag: str, placed: list, plot: tuple) -> tuple[float, float, str]:
    """Where a point's number goes: right, left, above or below it, the first spot inside the plot that no
    earlier label covers (labels are text, visible in any viewer; tooltips are not)."""
    width = CHAR_WIDTH * len(tag)
    left, top, right, bottom = plot
    spots = [
        (cx + 10, cy + 4, "start", cx + 10),
        (cx - 10, cy + 4, "end", cx - 10 - width),
        (cx, cy - 12, "middle", cx - width / 2),
        (cx, cy + 20, "middle", cx - width / 2),
    ]
    for offset in range(0, 200, 16):  # then the same spots further up
        for tx, ty, anchor, x0 in spots:
            box = (x0, ty - offset - LINE_HEIGHT + 3, x0 + width, ty - offset + 3)
            inside = box[0] >= left and box[2] <= right and box[1] >= top - 40 and box[3] <= bottom
            if inside and not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
                placed.append(box)
                return tx, ty - offset, anchor
    placed.append((cx, cy, cx, cy))
    return cx + 10, cy + 4, "start"


def _break_marks(left: float, bottom: float, x_broken: bool, y_broken: bool) -> list[str]:
    """Two short slashes across an axis that does not start at zero (a broken axis), next to the origin."""
    marks = []
    if x_broken:
        marks += [
            f'<line x1="{left + 8 + dx}" y1="{bottom + 5}" x2="{left + 14 + dx}" y2="{bottom - 5}" stroke="#000000"/>'
            for dx in (0, 5)
        ]
    if y_broken:
        marks += [
            f'<line x1="{left - 5}" y1="{bottom - 8 - dy}" x2="{left + 5}" y2="{bottom - 14 - dy}" stroke="#000000"/>'
            for dy in (0, 5)
        ]
    return marks


def _whiskers(p: Point, px, py, color: str) -> list[str]:
    lines = []
    if p.x_spread:
        lo, hi = p.x_spread
        lines.append(
            f'<line x1="{px(lo):.1f}" y1="{py(p.y):.1f}" x2="{px(hi):.1f}" y2="{py(p.y):.1f}" stroke="{color}" stroke-width="1.5"/>'
        )
    if p.y_spread:
        lo, hi = p.y_spread
        lines.append(
            f'<line x1="{px(p.x):.1f}" y1="{py(lo):.1f}" x2="{px(p.x):.1f}" y2="{py(hi):.1f}" stroke="{color}" stroke-width="1.5"/>'
        )
    return lines


PLOT_BOX = (100, 60, WIDTH - 40, 280)  # left, top, right, bottom of a scatter's plot area


def pareto(points: list[Point], x: Axis, y: Axis, title: str) -> str:
    """Scatter of options at their P50 with P10-P90 whiskers: ticks in the tables' units, the limits as dashed
    lines named with the quantile they are checked at, a broken-axis mark where an axis does not start at zero,
    every point numbered on the plot and described in a legend below it (visible without hovering)."""
    if not points:
        return _svg([f'<text x="{MARGIN}" y="80">no alternatives</text>'], title)
    left, top, right, bottom = PLOT_BOX
    xs = scaled_axis(x, [v for p in points for v in p.xs()], left, right - left)
    ys = scaled_axis(y, [v for p in points for v in p.ys()], bottom, -(bottom - top))
    placed: list[tuple[float, float, float, float]] = []  # label boxes so far, kept apart
    legend_top = bottom + 78
    body = _pareto_axes(xs, ys) + _limit_marks(xs, ys, placed) + _point_marks(points, xs, ys, placed, legend_top)
    if any(p.x_spread or p.y_spread for p in points):
        body.append(
            f'<text x="{MARGIN // 2}" y="{bottom + 56}" fill="#555555">points at P50, whiskers P10–P90 of the '
            "published actual ÷ predicted</text>"
        )
    return _svg(body, title, height=legend_top + 16 * len(points))


def _pareto_axes(xs: ScaledAxis, ys: ScaledAxis) -> list[str]:
    """The two axes, a break mark where one does not start at zero, the ticks and the axis labels."""
    left, top, right, bottom = PLOT_BOX
    px, py = xs.at, ys.at
    body = [
        f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#000000"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#000000"/>',
        *_break_marks(left, bottom, xs.lo > 0 and not xs.log, ys.lo > 0 and not ys.log),
    ]
    for tick in xs.ticks:
        body += [
            f'<line x1="{px(tick):.1f}" y1="{bottom}" x2="{px(tick):.1f}" y2="{bottom + 5}" stroke="#000000"/>',
            f'<text x="{px(tick):.1f}" y="{bottom + 18}" text-anchor="middle">{escape(xs.text(tick))}</text>',
        ]
    for tick in ys.ticks:
        body += [
            f'<line x1="{left - 5}" y1="{py(tick):.1f}" x2="{left}" y2="{py(tick):.1f}" stroke="#000000"/>',
            f'<text x="{left - 8}" y="{py(tick) + 4:.1f}" text-anchor="end">{escape(ys.text(tick))}</text>',
        ]
    return body + [
        f'<text x="{(left + right) / 2}" y="{bottom + 38}" text-anchor="middle">{escape(xs.label())}</text>',
        f'<text x="16" y="{(top + bottom) / 2}" transform="rotate(-90 16 {(top + bottom) / 2})" text-anchor="middle">{escape(ys.label())}</text>',
    ]


def _limit_marks(xs: ScaledAxis, ys: ScaledAxis, placed: list) -> list[str]:
    """Each axis' limit as a dashed line with its name, or, off the axis, named above the plot on the side it lies
    (so the points keep their spread). Adds the names' boxes to `placed`."""
    left, top, right, bottom = PLOT_BOX
    px, py = xs.at, ys.at
    body: list[str] = []

    def note(tx: float, ty: float, anchor: str, text: str) -> None:
        width = CHAR_WIDTH * len(text)
        x0 = tx - width if anchor == "end" else tx
        while any(x0 < b[2] and b[0] < x0 + width and ty - LINE_HEIGHT + 3 < b[3] and b[1] < ty + 3 for b in placed):
            ty += LINE_HEIGHT  # a line below the other limit's name, where both limits sit at the plot's top
        placed.append((x0, ty - LINE_HEIGHT + 3, x0 + width, ty + 3))
        body.append(f'<text x="{tx:.1f}" y="{ty:.1f}" text-anchor="{anchor}" fill="#e15759">{escape(text)}</text>')

    x, y = xs.axis, ys.axis
    if x.limit:
        text = x.limit_text(xs.text(x.limit))
        if xs.lo <= x.limit <= xs.hi:
            body.append(
                f'<line x1="{px(x.limit):.1f}" y1="{top}" x2="{px(x.limit):.1f}" y2="{bottom}" stroke="#e15759" stroke-dasharray="6 3"/>'
            )
            note(px(x.limit) - 4, top + 12, "end", text)
        else:  # off the axis: said above the plot on the side it lies, so the points keep their spread
            note(right, top - 12, "end", f"{text} {'→' if x.limit > xs.hi else '←'}")
    if y.limit:
        text = y.limit_text(ys.text(y.limit))
        if ys.lo <= y.limit <= ys.hi:
            body.append(
                f'<line x1="{left}" y1="{py(y.limit):.1f}" x2="{right}" y2="{py(y.limit):.1f}" stroke="#e15759" stroke-dasharray="6 3"/>'
            )
            note(
                left + 4,
                py(y.limit) - 4 if py(y.limit) - 4 - LINE_HEIGHT > top - 4 else py(y.limit) + 14,
                "start",
                text,
            )
        else:
            note(
                left + 4,
                top - 12 if y.limit > ys.hi else bottom - 6,
                "start",
                f"{text} {'↑' if y.limit > ys.hi else '↓'}",
            )
    return body


def _point_marks(points: list[Point], xs: ScaledAxis, ys: ScaledAxis, placed: list, legend_top: float) -> list[str]:
    """Every point's whiskers, then the point with its number beside it (where no earlier label is) and its legend
    line below the plot."""
    px, py = xs.at, ys.at
    body: list[str] = []
    for p in points:
        body += _whiskers(p, px, py, "#e15759" if p.chosen else "#9db7d5")
    for number, p in enumerate(points, 1):
        cx, cy = px(p.x), py(p.y)
        color, r = ("#e15759", 7) if p.chosen else ("#4e79a7", 4)
        tag = f"{number}{' (chosen)' if p.chosen else ''}"
        tx, ty, anchor = _label_spot(cx, cy, tag, placed, PLOT_BOX)
        body += [
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{r}" fill="{color}"><title>{escape(p.label)}</title></circle>',
            f'<text x="{tx:.1f}" y="{ty:.1f}" text-anchor="{anchor}">{tag}</text>',
        ]
        weight = ' font-weight="bold"' if p.chosen else ""
        body.append(
            f'<text x="{MARGIN // 2}" y="{legend_top + 16 * (number - 1)}"{weight}>{number}. {escape(_clip(p.label))}</text>'
        )
    return body

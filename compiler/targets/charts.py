"""SVG charts written next to REPORT.md, built as text (no plotting dependency).

Every string placed in the SVG goes through xml escaping; coordinates are rounded to 0.1 px so the
output is byte-stable.
"""

from __future__ import annotations

from html import escape as _html_escape


def escape(text: str) -> str:
    """Text-node escaping (&, <, >), as xml.sax.saxutils.escape does, without importing urllib/http."""
    return _html_escape(text, quote=False)


WIDTH, HEIGHT, MARGIN = 640, 360, 60
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1")


def _svg(body: list[str], title: str) -> str:
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">')
    return "\n".join([head, f"<title>{escape(title)}</title>", f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
                      f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>', *body, "</svg>"]) + "\n"


def memory_bar(terms: list[tuple[str, float]], capacity_bytes: float, title: str) -> str:
    """One stacked horizontal bar of memory terms (GiB) against the usable capacity line."""
    total = sum(v for _, v in terms)
    scale_max = max(total, capacity_bytes, 1.0) * 1.1
    plot_w = WIDTH - 2 * MARGIN
    x, y, h = float(MARGIN), 80.0, 60.0
    body = []
    for i, (name, value) in enumerate(terms):
        w = plot_w * value / scale_max
        color = PALETTE[i % len(PALETTE)]
        body.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{color}"/>')
        legend_y = 180 + 18 * i
        body.append(f'<rect x="{MARGIN}" y="{legend_y - 10}" width="12" height="12" fill="{color}"/>')
        body.append(f'<text x="{MARGIN + 18}" y="{legend_y}">{escape(name)}: {value / 2**30:.1f} GiB</text>')
        x += w
    cap_x = MARGIN + plot_w * capacity_bytes / scale_max
    body.append(f'<line x1="{cap_x:.1f}" y1="60" x2="{cap_x:.1f}" y2="160" stroke="#000000" stroke-width="2" stroke-dasharray="6 3"/>')
    body.append(f'<text x="{cap_x:.1f}" y="55" text-anchor="middle">usable {capacity_bytes / 2**30:.1f} GiB</text>')
    body.append(f'<text x="{MARGIN}" y="{y + h + 16:.1f}">total {total / 2**30:.1f} GiB per GPU</text>')
    return _svg(body, title)


def pareto(points: list[tuple[str, float, float, bool]], x_label: str, y_label: str, title: str) -> str:
    """Scatter of (label, x, y, chosen) with the chosen point marked; axes start at zero."""
    if not points:
        return _svg([f'<text x="{MARGIN}" y="80">no alternatives</text>'], title)
    max_x = max(p[1] for p in points) * 1.15 or 1.0
    max_y = max(p[2] for p in points) * 1.15 or 1.0
    plot_w, plot_h = WIDTH - 2 * MARGIN, HEIGHT - 2 * MARGIN
    body = [
        f'<line x1="{MARGIN}" y1="{HEIGHT - MARGIN}" x2="{WIDTH - MARGIN}" y2="{HEIGHT - MARGIN}" stroke="#000000"/>',
        f'<line x1="{MARGIN}" y1="{MARGIN}" x2="{MARGIN}" y2="{HEIGHT - MARGIN}" stroke="#000000"/>',
        f'<text x="{WIDTH / 2}" y="{HEIGHT - 20}" text-anchor="middle">{escape(x_label)}</text>',
        f'<text x="15" y="{HEIGHT / 2}" transform="rotate(-90 15 {HEIGHT / 2})" text-anchor="middle">{escape(y_label)}</text>',
    ]
    for label, px, py, chosen in points:
        cx = MARGIN + plot_w * px / max_x
        cy = HEIGHT - MARGIN - plot_h * py / max_y
        color, r = ("#e15759", 7) if chosen else ("#4e79a7", 4)
        body.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{r}" fill="{color}"><title>{escape(label)}</title></circle>')
        if chosen:
            body.append(f'<text x="{cx + 10:.1f}" y="{cy - 8:.1f}">chosen: {escape(label)}</text>')
    return _svg(body, title)

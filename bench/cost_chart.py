#!/usr/bin/env python3
"""Held-out bits per byte against cost, for several runs on one chart (an SVG, no dependencies).

Each curve is NAME=PATH, where PATH is either a run's `lineage.jsonl` (each scored checkpoint's
`heldout_bpb`, `heldout_bpb_se`, `device_s` and `energy_j`) or a results summary in
`bench/results/` whose first table has the columns "training s", "GPU energy (kJ)" and
"held-out bits per byte" (and optionally "± se"): the figures a summary keeps when a run's
records stay out of the tree. Two panels: against training seconds and against GPU energy,
the band ±2 standard errors over held-out windows where the source gives them.

    python3 bench/cost_chart.py --out chart.svg \
        "GPT-2 small=bench/results/2026-12-01-h200-gpt2-gutenberg-pass.md" \
        "Diakosmos=runs/diakosmos-pass/alpha/lineage.jsonl"
"""
import argparse
import json
import math
import re
import sys
from html import escape

COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c"]


def from_lineage(path):
    """Scored checkpoints of the run's main line, by step (a resumed step's last record wins)."""
    rows = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON ({e})")
            if r.get("branch") or r.get("heldout_bpb") is None or r.get("device_s") is None:
                continue
            energy = r.get("energy_j")
            rows[r["step"]] = {
                "s": float(r["device_s"]),
                "kj": None if energy is None else float(energy) / 1e3,
                "bpb": float(r["heldout_bpb"]),
                "se": r.get("heldout_bpb_se"),
            }
    return [rows[k] for k in sorted(rows)]


def number(cell):
    cell = cell.replace(",", "").replace("*", "").strip()
    return float(cell) if re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", cell) else None


# A results table's columns: training seconds, energy, bits per byte.
RESULTS_COLUMNS = {"s": "training s", "kj": "gpu energy (kj)", "bpb": "held-out bits per byte"}


def from_results(path):
    """The first markdown table with the needed columns."""
    lines = open(path).read().splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            continue
        head = [c.strip().lower() for c in line.strip("|").split("|")]
        if not all(v in head for v in RESULTS_COLUMNS.values()):
            continue
        col = {k: head.index(v) for k, v in RESULTS_COLUMNS.items()}
        se_col = head.index("± se") if "± se" in head else None
        points = []
        for row in lines[i + 2:]:
            if not row.startswith("|"):
                break
            cells = [c.strip() for c in row.strip("|").split("|")]
            p = {k: number(cells[c]) for k, c in col.items()}
            if p["s"] is None or p["bpb"] is None:
                continue
            p["se"] = number(cells[se_col]) if se_col is not None else None
            points.append(p)
        if points:
            return points
    sys.exit(f"{path}: no table with the columns {', '.join(repr(v) for v in RESULTS_COLUMNS.values())}")


def nice_ticks(lo, hi, count=5):
    span = hi - lo
    step = 10 ** math.floor(math.log10(span / count))
    for m in (1, 2, 2.5, 5, 10):
        if span / (step * m) <= count:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def label(v):
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:g}"


def panel(curves, key, x0, title, x_label, width=440, height=300):
    """One panel's SVG elements, placed at x0."""
    left, right, top, bottom = x0 + 56, x0 + width - 12, 34, height - 44
    xs = [p[key] for _, pts in curves for p in pts if p[key] is not None]
    ys = [v for _, pts in curves for p in pts if p[key] is not None
          for v in ([p["bpb"]] + ([p["bpb"] - 2 * p["se"], p["bpb"] + 2 * p["se"]] if p["se"] else []))]
    if not xs:
        return [f'<text x="{x0 + width / 2}" y="{height / 2}" text-anchor="middle">no {x_label}</text>']
    x_hi = max(xs) * 1.03
    y_lo, y_hi = min(ys) - 0.03, max(ys) + 0.03
    sx = lambda v: left + (v / x_hi) * (right - left)
    sy = lambda v: bottom - (v - y_lo) / (y_hi - y_lo) * (bottom - top)
    out = [f'<text x="{x0 + width / 2}" y="18" text-anchor="middle" font-weight="600">{escape(title)}</text>',
           f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="none" stroke="#999"/>']
    for t in nice_ticks(0, x_hi):
        out.append(f'<line x1="{sx(t):.1f}" y1="{top}" x2="{sx(t):.1f}" y2="{bottom}" stroke="#eee"/>')
        out.append(f'<text x="{sx(t):.1f}" y="{bottom + 14}" text-anchor="middle" font-size="11">{label(t)}</text>')
    for t in nice_ticks(y_lo, y_hi):
        out.append(f'<line x1="{left}" y1="{sy(t):.1f}" x2="{right}" y2="{sy(t):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 5}" y="{sy(t) + 4:.1f}" text-anchor="end" font-size="11">{t:.2f}</text>')
    out.append(f'<text x="{(left + right) / 2}" y="{height - 10}" text-anchor="middle" font-size="12">{escape(x_label)}</text>')
    out.append(f'<text transform="translate({x0 + 14},{(top + bottom) / 2}) rotate(-90)" text-anchor="middle" '
               f'font-size="12">held-out bits per byte</text>')
    for i, (_, pts) in enumerate(curves):
        color = COLORS[i % len(COLORS)]
        pts = [p for p in pts if p[key] is not None]
        band = [p for p in pts if p["se"]]
        if len(band) > 1:
            upper = " ".join(f"{sx(p[key]):.1f},{sy(p['bpb'] + 2 * p['se']):.1f}" for p in band)
            lower = " ".join(f"{sx(p[key]):.1f},{sy(p['bpb'] - 2 * p['se']):.1f}" for p in reversed(band))
            out.append(f'<polygon points="{upper} {lower}" fill="{color}" fill-opacity="0.12" stroke="none"/>')
        line = " ".join(f"{sx(p[key]):.1f},{sy(p['bpb']):.1f}" for p in pts)
        out.append(f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="2"/>')
        out += [f'<circle cx="{sx(p[key]):.1f}" cy="{sy(p["bpb"]):.1f}" r="2.5" fill="{color}"/>' for p in pts]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("curves", nargs="+", metavar="NAME=PATH", help="a lineage.jsonl or a results summary (.md)")
    ap.add_argument("--out", required=True, help="the SVG to write")
    ap.add_argument("--title", default=None)
    a = ap.parse_args(argv)
    curves = []
    for spec in a.curves:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            ap.error(f"'{spec}': give NAME=PATH")
        try:
            pts = from_results(path) if path.endswith(".md") else from_lineage(path)
        except OSError as e:
            sys.exit(f"{path}: {e.strerror}")
        if not pts:
            sys.exit(f"{path}: no scored checkpoint with training seconds")
        curves.append((name, pts))
    width, height = 900, 340
    body = panel(curves, "s", 0, "Against training seconds", "GPU training seconds") + \
        panel(curves, "kj", 450, "Against GPU energy", "GPU energy, kJ")
    legend = []
    for i, (name, pts) in enumerate(curves):
        y = height + 6 + 16 * i
        last = pts[-1]
        legend.append(f'<line x1="60" y1="{y}" x2="84" y2="{y}" stroke="{COLORS[i % len(COLORS)]}" stroke-width="3"/>')
        energy = "" if last["kj"] is None else f" and {last['kj']:,.0f} kJ"
        legend.append(f'<text x="90" y="{y + 4}" font-size="12">{escape(name)}: {last["bpb"]:.4f} bits per byte at '
                      f'{last["s"]:,.0f} s{energy}</text>')
    total_h = height + 16 * len(curves) + 14
    title = f'<title>{escape(a.title)}</title>' if a.title else ""
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total_h}" viewBox="0 0 {width} {total_h}" '
           f'font-family="sans-serif">{title}<rect width="100%" height="100%" fill="white"/>'
           + "".join(body + legend) + "</svg>\n")
    with open(a.out, "w") as f:
        f.write(svg)
    print(f"wrote {a.out}: " + "; ".join(f"{n} ({len(p)} points)" for n, p in curves))
    return 0


if __name__ == "__main__":
    sys.exit(main())

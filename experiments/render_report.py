"""Render a report page in headless Chromium and check that it is not blank.

Usage: ``python experiments/render_report.py report.html [--png out.png]``

Checks: the HTML is self-contained (no external scripts, styles or images), holds the candidate table and
its plots; the screenshot has plenty of non-white pixels, coloured plot marks, and ink in every quarter of the
first screen (heading, cards, trajectory, root-cause and category plots). Exit 0 when all checks pass,
1 when one fails (each failure printed), 2 when Chromium is missing or fails to render.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from matplotlib import image

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars")
WINDOW = (1280, 2000)
#: Minimum shares of the screenshot's pixels.
MIN_INK = 0.04        # not white
MIN_COLOUR = 0.004    # saturated (plot bars, markers, badges)
MIN_BAND_INK = 0.01   # not white, in each quarter of the first 1600 px


def find_chromium() -> str | None:
    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


def screenshot(html: Path, png: Path, chromium: str, fragment: str = "") -> None:
    """Render ``html`` (opened at ``#fragment`` when given) to ``png``; raises ``RuntimeError`` with Chromium's
    output if no image was written."""
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={png}",
                               f"--window-size={WINDOW[0]},{WINDOW[1]}", _url(html, fragment)],
                              capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 or not png.is_file():
        raise RuntimeError(f"chromium exited {proc.returncode} without writing {png}:\n{proc.stderr[-2000:]}")


def _url(html: Path, fragment: str) -> str:
    return html.resolve().as_uri() + (f"#{fragment}" if fragment else "")


def rendered_dom(html: Path, chromium: str, fragment: str = "") -> str:
    """The page's DOM after its scripts ran (opened at ``#fragment`` when given), as Chromium serialises it."""
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=3000",
                               "--dump-dom", _url(html, fragment)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 or "<html" not in proc.stdout:
        raise RuntimeError(f"chromium exited {proc.returncode} without a DOM:\n{proc.stderr[-2000:]}")
    return proc.stdout


def check_html(text: str) -> list[str]:
    """Problems with the page source (empty if none)."""
    problems = []
    external = re.findall(r'<(?:script|img|link|iframe)\b[^>]*(?:src|href)="(?!#|data:)[^"]*"', text)
    if external:
        problems.append(f"external assets referenced: {external[:3]}")
    if text.count("<svg") < 3:
        problems.append(f"expected 3 inline SVG plots, found {text.count('<svg')}")
    if not re.search(r'<th>id</th>.*?<th>verdict</th>', text, re.S):
        problems.append("candidate table (id ... verdict columns) missing")
    links = set(re.findall(r'href="#(cand-[^"]+)"', text))
    anchors = set(re.findall(r'id="(cand-[^"]+)"', text))
    if not links or links - anchors:
        problems.append(f"candidate links without anchors: {sorted(links - anchors)[:5] or 'no links'}")
    return problems


def check_png(png: Path) -> tuple[dict[str, float], list[str]]:
    """Pixel statistics of the screenshot and the problems they show."""
    rgb = image.imread(png)[..., :3].astype(float)
    if rgb.max() > 1.0:
        rgb = rgb / 255.0
    ink = rgb.min(axis=2) < 0.92
    colour = (rgb.max(axis=2) - rgb.min(axis=2)) > 0.25
    stats = {"ink": float(ink.mean()), "colour": float(colour.mean())}
    problems = []
    if stats["ink"] < MIN_INK:
        problems.append(f"mostly blank: {stats['ink']:.1%} non-white pixels (< {MIN_INK:.0%})")
    if stats["colour"] < MIN_COLOUR:
        problems.append(f"no plots visible: {stats['colour']:.2%} coloured pixels (< {MIN_COLOUR:.1%})")
    top = ink[:1600]
    for i, band in enumerate(np.array_split(top, 4)):
        stats[f"band{i}"] = float(band.mean())
        if band.mean() < MIN_BAND_INK:
            problems.append(f"band {i} of the first screen is blank ({band.mean():.2%} ink)")
    return stats, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path)
    parser.add_argument("--png", type=Path, help="screenshot path (default: next to the HTML)")
    args = parser.parse_args(argv)
    chromium = find_chromium()
    if chromium is None:
        print("chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    png = args.png or args.html.with_suffix(".png")
    try:
        screenshot(args.html, png, chromium)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"render failed: {exc}", file=sys.stderr)
        return 2
    stats, problems = check_png(png)
    problems = check_html(args.html.read_text(encoding="utf-8")) + problems
    print(f"{png}: " + ", ".join(f"{k} {v:.2%}" for k, v in stats.items()))
    for problem in problems:
        print(f"FAIL: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

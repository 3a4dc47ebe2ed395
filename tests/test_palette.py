"""One colour-blind-safe palette for every figure (reluattn/palette.py), series told apart by more than colour,
and code on the docs site at >= 4.5:1 contrast (WCAG AA) against its background.

The figures' code is read as text: no plotting code of the package, the benchmarks, the docs' figure
script or the tutorials names a colour or colour map of its own (matplotlib's "C0"..., "tab:blue", "red",
"grey", "inferno", ...): each takes it from reluattn.palette. The package's figures are drawn and their lines
compared: no two series share both marker and line style.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

from reluattn import palette

ROOT = Path(__file__).resolve().parents[1]


def luminance(colour: str) -> float:
    """WCAG relative luminance of a #rrggbb colour."""
    channels = [int(colour.lstrip("#")[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(first: str, second: str) -> float:
    light, dark = sorted((luminance(first), luminance(second)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_contrast_formula():
    assert contrast("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast("#767676", "#ffffff") == pytest.approx(4.54, abs=0.01)


def test_the_palette_is_okabe_ito_and_every_series_differs_by_more_than_colour():
    assert set(palette.COLOURS) <= set(palette.OKABE_ITO.values())
    assert palette.OKABE_ITO["yellow"] not in palette.COLOURS  # 1.3:1 against a white page
    assert len(set(palette.COLOURS)) == len(palette.COLOURS) == len(set(palette.MARKERS)) == len(palette.LINESTYLES)
    assert len({str(style) for style in palette.LINESTYLES}) == len(palette.LINESTYLES)
    assert all(contrast(colour, "#ffffff") >= 2.2 for colour in palette.COLOURS)
    assert contrast(palette.REFERENCE, "#ffffff") >= 4.5
    styles = [palette.series(i) for i in range(len(palette.COLOURS))]
    assert len({(s["marker"], str(s["linestyle"])) for s in styles}) == len(styles)
    assert palette.series(0, line=False)["linestyle"] == "none" and palette.series(0, marker=False)["marker"] == "none"
    cycle = palette.prop_cycle().by_key()
    assert cycle["color"] == list(palette.COLOURS) and cycle["marker"] == list(palette.MARKERS)
    assert {palette.SEQUENTIAL, palette.HEAT, palette.DIVERGING} == {"viridis", "inferno", "RdBu_r"}


# A colour or colour map written into plotting code, rather than taken from reluattn.palette.
LITERAL = re.compile(r"""\b(?:color|colors|colour|cmap|facecolor|edgecolor)\s*=\s*["'](?!white["'])"""
                     r"""|["']C\d[^"']*["']|["']tab:\w+["']""")


def plotting_sources() -> dict:
    """{name: source} of every file that draws figures: the package, the benchmarks, the docs' figure script,
    and the tutorials' code cells."""
    files = [*(ROOT / "reluattn").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py"),
             *(ROOT / "docs" / "figures").glob("*.py")]
    sources = {str(path.relative_to(ROOT)): path.read_text(encoding="utf-8") for path in files
               if path.name != "palette.py"}
    for path in sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.ipynb")):
        sources[str(path.relative_to(ROOT))] = "\n".join(
            cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code")
    return sources


def test_no_plotting_code_picks_its_own_colours():
    sources = plotting_sources()
    assert sum("matplotlib" in text or "plt." in text for text in sources.values()) >= 8
    found = {name: LITERAL.findall(text) for name, text in sources.items() if LITERAL.search(text)}
    assert not found, f"colours not taken from reluattn.palette: {found}"
    assert LITERAL.search('ax.plot(x, y, color="grey")') and LITERAL.search('styles = {"a": "C0o-"}')
    assert not LITERAL.search('ax.axvline(3, color="white")')


def test_every_tutorial_that_plots_sets_the_palette_first():
    for path in sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.ipynb")):
        code = [cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]
        setup = next(source for source in code if "import matplotlib.pyplot as plt" in source)
        assert "plt.rcParams.update(palette.rc_params())" in setup, path.name


def test_the_package_figures_tell_series_apart_without_colour(tmp_path, monkeypatch):
    from reluattn.study import figures
    from reluattn.training import plots

    drawn = []
    monkeypatch.setattr(plots, "_save", lambda figure, output: drawn.append(figure) or Path(output))
    for name in ("relu", "softmax", "gelu"):
        run = tmp_path / name
        run.mkdir()
        records = [{"split": "train", "step": step, "loss": 2.0 - step / 100} for step in range(0, 100, 10)]
        records += [{"split": "val", "step": step, "accuracy": step / 200} for step in (50, 100)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    plots.plot_runs([tmp_path / name for name in ("relu", "softmax", "gelu")], tmp_path / "curves.png")
    accuracy_axes = drawn[0].axes[1]
    lines = [line for line in accuracy_axes.get_lines() if not line.get_label().startswith("_")]
    assert len(lines) == 3
    assert len({(line.get_marker(), str(line.get_linestyle())) for line in lines}) == 3
    assert {line.get_color() for line in lines} <= set(palette.COLOURS)

    from matplotlib.figure import Figure
    axes = Figure().subplots()
    figures._plot_series(axes, {kind: [(1, 0.5, 0.1), (2, 0.6, 0.1)] for kind in ("a", "b", "c", "d")})
    # the series' lines, not the error bars' caps
    lines = [line for line in axes.get_lines() if line.get_marker() not in (None, "None", "none", "", "_")]
    assert len({(line.get_marker(), str(line.get_linestyle())) for line in lines}) == 4


def test_code_on_the_docs_site_has_at_least_4_5_to_1_contrast():
    """Every token colour of the Pygments styles docs/conf.py names, light and dark, against its background
    (the styles' own background, or the token's)."""
    from pygments.styles import get_style_by_name

    conf = ast.parse((ROOT / "docs" / "conf.py").read_text(encoding="utf-8"))
    names = {node.targets[0].id: node.value.value for node in conf.body if isinstance(node, ast.Assign)
             and isinstance(node.targets[0], ast.Name) and node.targets[0].id.startswith("pygments")}
    assert set(names) == {"pygments_style", "pygments_dark_style"}
    for name in names.values():
        style = get_style_by_name(name)
        background = style.background_color
        ratios = {str(token): contrast(f"#{spec['color']}", f"#{spec['bgcolor']}" if spec["bgcolor"] else background)
                  for token, spec in style if spec["color"]}
        low = {token: round(ratio, 2) for token, ratio in ratios.items() if ratio < 4.5}
        assert ratios and not low, f"{name}: tokens under 4.5:1 against {background}: {low}"
    assert np.isclose(contrast("#2b2b2b", "#2b2b2b"), 1.0)

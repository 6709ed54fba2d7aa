"""Histograms of error/bound per property (a panel per quantity, a series per dtype), as PNG bytes.

matplotlib's object API with the Agg canvas: no pyplot, no global backend
switch, so rendering inside a pytest run touches nothing else.
"""

from __future__ import annotations

import io
import math
from typing import Dict, List

LOW, HIGH = 1e-4, 1e2  # ratios outside are clamped into the edge bins (exact 0, inf/NaN)
PANEL_IN, TOP_IN, BOTTOM_IN, GAP_IN = 2.6, 0.3, 0.55, 0.65  # a panel's height; the margins above, below, between panels


def ratio_histogram(property: str, ratios: Dict[str, List[float]]) -> bytes:
    """One panel per quantity, one series per dtype: ``ratios`` is keyed
    "quantity dtype" (e.g. "o fp16"); a key without a dtype is its own panel."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels: Dict[str, Dict[str, List[float]]] = {}
    for key, values in sorted(ratios.items()):
        quantity, _, dtype = key.partition(" ")
        panels.setdefault(quantity, {})[dtype or quantity] = values
    height = PANEL_IN * max(1, len(panels))
    fig = Figure(figsize=(6.4, height), dpi=100)
    # Fixed margins in inches: tight_layout measures every tick label of every panel first.
    fig.subplots_adjust(left=0.11, right=0.97, top=1 - TOP_IN / height, bottom=BOTTOM_IN / height, hspace=GAP_IN / (PANEL_IN - GAP_IN / 2))
    FigureCanvasAgg(fig)
    edges = [10 ** (math.log10(LOW) + i * (math.log10(HIGH) - math.log10(LOW)) / 48) for i in range(49)]
    for i, (quantity, series) in enumerate(panels.items()):
        ax = fig.add_subplot(len(panels), 1, i + 1)
        for label, values in series.items():
            clamped = [HIGH if (math.isnan(v) or v >= HIGH) else max(LOW, v) for v in values]
            top = max(values) if values else float("nan")
            ax.hist(clamped, bins=edges, histtype="step", linewidth=1.5, label=f"{label} (n={len(values)}, max={top:.3g})")
        ax.axvline(1.0, color="red", linestyle="--", linewidth=1, label="bound (ratio 1)")
        ax.set_xscale("log")
        ax.set_xlim(LOW, HIGH)
        ax.set_ylabel("examples")
        ax.set_title(f"{property}: {quantity} error / bound")
        ax.legend(fontsize="small")
    ax.set_xlabel("error / bound (edge bins hold exact 0 and inf/NaN)")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()

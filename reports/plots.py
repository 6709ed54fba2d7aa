"""Histograms of error/bound per property, as PNG bytes.

matplotlib's object API with the Agg canvas: no pyplot, no global backend
switch, so rendering inside a pytest run touches nothing else.
"""

from __future__ import annotations

import io
import math
from typing import Dict, List

LOW, HIGH = 1e-4, 1e2  # ratios outside are clamped into the edge bins (exact 0, inf/NaN)


def ratio_histogram(property: str, ratios: Dict[str, List[float]]) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 3.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    edges = [10 ** (math.log10(LOW) + i * (math.log10(HIGH) - math.log10(LOW)) / 48) for i in range(49)]
    for quantity, values in sorted(ratios.items()):
        clamped = [HIGH if (math.isnan(v) or v >= HIGH) else max(LOW, v) for v in values]
        ax.hist(clamped, bins=edges, histtype="step", linewidth=1.5, label=f"{quantity} (n={len(values)}, max={max(values):.3g})")
    ax.axvline(1.0, color="red", linestyle="--", linewidth=1, label="bound (ratio 1)")
    ax.set_xscale("log")
    ax.set_xlim(LOW, HIGH)
    ax.set_xlabel("error / bound (edge bins hold exact 0 and inf/NaN)")
    ax.set_ylabel("examples")
    ax.set_title(f"{property}: error / bound")
    ax.legend(fontsize="small")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()

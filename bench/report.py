"""Where benchmark output goes and how it is written, shared by every benchmark.

Results are plain JSON next to the scripts (diffable, re-plottable), plots are PNGs in
docs/img, and each benchmark prints the markdown table that docs/benchmarks.md quotes,
so a re-run shows at once whether the documented numbers still hold.
"""

from __future__ import annotations

import json
import platform
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on the build machines

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "bench" / "results"
IMAGE_DIR = REPO_ROOT / "docs" / "img"
PLOT_DPI = 110


def save_figure(fig, path: Path) -> None:
    """Lay out, write at the documents' resolution, and free the figure."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=PLOT_DPI)
    plt.close(fig)


def image_path(name: str) -> Path:
    IMAGE_DIR.mkdir(parents=True, exist_ok=True)
    return IMAGE_DIR / f"bench-{name}.png"


def now() -> str:
    """The time of a measurement, as results files say it (UTC, to the second)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def results_path(name: str) -> Path:
    return RESULTS_DIR / f"{name}.json"


def write_results(name: str, results: dict) -> Path:
    """Save results with the machine they were measured on."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = results_path(name)
    record = {
        "benchmark": name,
        "measured_at": now(),
        "python": sys.version.split()[0],
        "machine": platform.platform(),
        **results,
    }
    path.write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")
    return path


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)

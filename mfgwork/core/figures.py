"""Writing a figure to files: a PNG for the screen and a PDF for print.

The PDF is vector graphics at publication size: a figure wider than a page's text width
(:data:`PRINT_WIDTH` inches) is scaled down to it, keeping its aspect ratio, so that its fonts
print at their point size. Anything with ``savefig`` is accepted (a matplotlib ``Figure``,
or an object of the same interface).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PRINT_WIDTH = 7.0  # inches: the text width of a page
FORMATS = ("png", "pdf")


def save_figure(fig: Any, folder: Path, name: str) -> list[Path]:
    """Write ``folder/<name>.png`` (at the figure's dpi) and ``folder/<name>.pdf`` (vector,
    at most :data:`PRINT_WIDTH` inches wide); returns both paths."""
    png, pdf = (folder / f"{name}.{ext}" for ext in FORMATS)
    fig.savefig(png, dpi=getattr(fig, "dpi", 100))
    size = fig.get_size_inches() if hasattr(fig, "get_size_inches") else None
    if size is not None and size[0] > PRINT_WIDTH:
        fig.set_size_inches(PRINT_WIDTH, size[1] * PRINT_WIDTH / size[0])
    try:
        fig.savefig(pdf, format="pdf")
    finally:
        if size is not None:
            fig.set_size_inches(*size)
    return [png, pdf]

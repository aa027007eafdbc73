"""Terminal colour codes out of text that goes into an error message."""

from __future__ import annotations

import re

# CSI sequences (colours, cursor moves: ESC [ parameters intermediates final) and OSC
# sequences (ESC ] ... BEL or ESC \), as IPython and nbclient put them into tracebacks
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


def strip_ansi(text: str) -> str:
    """``text`` without ANSI escape sequences."""
    return _ANSI.sub("", text)

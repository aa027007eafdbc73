"""Triton for the package's kernels, its installation key remembered across processes
(:mod:`.triton_key`). Kernel modules (and the generated model modules) import it from here::

    from ..core.triton_setup import tl, triton
"""

import triton
import triton.language as tl

from .triton_key import remember_key

__all__ = ["tl", "triton"]

remember_key(triton)

"""Analysis: figures and studies built on solved results.

``plots`` (the standard figures, each a function returning a matplotlib Figure), ``studies``
(backend comparisons and refinement loops). Imports from the front door (``solve``,
``results``) and below.
"""

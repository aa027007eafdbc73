"""Apps: what a person drives.

``explorer`` (the ipywidgets Santa Fe explorer), ``doctor`` (backends, devices and a
per-kernel agreement check). Imports from any layer below; nothing imports an app but
``mfgwork.__main__``.
"""

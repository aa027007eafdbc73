"""Core: the pieces every layer uses and that know nothing of MFG models.

``backend`` (array namespaces, devices, dtypes, conversions, device information), ``grid``
(space and time grids, quadrature weights), ``errors`` (error types and argument checks),
``cuda_graphs`` (record-and-replay of device work), ``memory`` (the size guard: estimates
checked against the device before allocating), ``storage`` (every atomic write, the marker
of result folders, checked readers, provenance). Imports only the standard library, NumPy
and, lazily, PyTorch.
"""

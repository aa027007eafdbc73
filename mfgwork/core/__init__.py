"""Core: the pieces every layer uses and that know nothing of MFG models.

``backend`` (array namespaces, devices, dtypes, conversions, device information), ``grid``
(space and time grids, quadrature weights), ``errors`` (error types and argument checks),
``cuda_graphs`` (record-and-replay of device work). Imports only the standard library, NumPy
and, lazily, PyTorch.
"""

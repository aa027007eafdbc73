"""Data shipped with the package: the measured crossover table (crossover.json)."""

"""``tqgguf sweep``: K × V × rotation × K-center grids scored by PPL and KL divergence against f16.

``grid`` expands the lists, ``runner`` runs them (metrics from tqgguf.quality), ``report``
writes the table, CSV, plot and recommendation.
"""

"""``tqgguf sweep``: K × V × rotation grids scored by PPL and KL divergence against f16."""
from .grid import BASELINE, DEFAULT_K, DEFAULT_V, Config, expand, parse_rot, parse_types  # noqa: F401
from .kld import BaselineMismatchError, KLDStats  # noqa: F401
from .runner import SweepSpec, run_sweep  # noqa: F401

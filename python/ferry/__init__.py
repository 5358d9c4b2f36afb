"""Ferry: train networks whose training memory does not fit, by planned swapping.

`ferry.torch` is the PyTorch adapter (record an iteration, plan it, train under a budget);
`ferry._ferry` is the C++ core it uses (Ferry's planner, simulator, swap tiers, transfer engine).
"""
from ferry._ferry import format_bytes, parse_bytes  # noqa: F401

"""Ours beside cuBLAS (compare.py): the same buffers, the same timer, the launch path's own launch of
the selected kernel. Above the launch path (it imports runtime/ and select/), so that measure/, the
worker's side, imports neither."""

"""The GPU layer, below everything that reaches a GPU: driver.py is the one binding of the CUDA driver
(libcuda is opened there and nowhere else), which the launch path (runtime/), the worker's programmatic
launches (measure/pdl.py) and the tensor-map encoder (ops/tma.py) share."""

"""Entry point of the worker subprocess: python -m autotune.measure.worker --device N."""

from autotune.measure.worker.server import main

main()

"""Entry point of the worker subprocess: python -m autotune.worker --device N."""

from autotune.worker.server import main

main()

"""Performance benchmarks for mtpconsole (project issue 7).

``python -m bench`` runs every benchmark and rewrites ``BENCHMARKS.md``; ``python -m bench --quick``
runs each one at a tiny size as a smoke test (no timing targets are enforced anywhere).
"""

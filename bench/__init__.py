"""seqsketch benchmarks: ``python -m bench NAME [--quick]`` runs ``bench/NAME.py`` and writes its figures to
``bench/results/NAME.json``.  A benchmark module defines ``run(quick: bool) -> dict`` returning JSON-able
figures; measurements belong here, never in timed tests."""

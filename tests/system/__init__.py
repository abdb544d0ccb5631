"""End-to-end and cross-package tests: real servers and processes, faults, fuzzing the HTTP door, a Spark
cluster, the console in a browser, the benchmark smoke test and the import layout."""

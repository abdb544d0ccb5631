"""Tests of the index: Bloom filters, the tree, sizing, approximate answers, verification, the Spark build."""

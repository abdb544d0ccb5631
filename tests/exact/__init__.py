"""Tests of the exact engine: the query language, readers, the event store, the engine and its reference."""

"""gpframe subpackage."""

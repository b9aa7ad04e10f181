"""Evidence backends: `snapshot` (a scenario's frozen data) and, elsewhere, `live`."""

from rootproof.tools.backends.snapshot import SnapshotBackend, TextQuery, parse_query, ref_paths_with_sources

__all__ = ["SnapshotBackend", "TextQuery", "parse_query", "ref_paths_with_sources"]

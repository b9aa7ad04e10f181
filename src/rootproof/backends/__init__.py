"""Tool backends: `snapshot` (a scenario's frozen data) and `live` (the user's own systems).

The drivers (psycopg, redis-py, httpx for Prometheus and Loki) are imported only inside
`rootproof.backends.live`; core modules never import them.
"""

from rootproof.backends.query import TextQuery, parse_query
from rootproof.backends.snapshot import SnapshotBackend, ref_paths_with_sources

__all__ = ["SnapshotBackend", "TextQuery", "parse_query", "ref_paths_with_sources"]

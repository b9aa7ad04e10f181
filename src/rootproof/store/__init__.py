"""The trace store: SQLAlchemy 2 tables and Alembic migrations on SQLite, PostgreSQL and MariaDB.

Core code never imports this package; it writes through `rootproof.run.records.TraceSink`,
which `SqlTraceStore` implements. `upgrade(url)` applies the migrations (`rootproof db upgrade`).
"""

from rootproof.store.sql import SqlTraceStore, upgrade

__all__ = ["SqlTraceStore", "upgrade"]

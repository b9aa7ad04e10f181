"""Alembic environment of the trace store.

Run programmatically by `rootproof.store.sql.upgrade` (and `SqlTraceStore`), which hands over an
open connection in `config.attributes["connection"]`; there is no alembic.ini and no logging
configuration here. Offline mode (`--sql`) renders DDL for `sqlalchemy.url`.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from rootproof.store.models import VERSION_TABLE, Base

config = context.config
target_metadata = Base.metadata


def _run_online(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    _run_offline()
else:
    connection = config.attributes.get("connection")
    if connection is None:
        raise RuntimeError(
            "rootproof migrations run through rootproof.store.upgrade(url), which passes a connection"
        )
    _run_online(connection)

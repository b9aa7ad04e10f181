"""Alembic revision scripts of the trace store."""

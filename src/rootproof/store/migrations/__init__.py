"""Alembic migrations of the trace store, shipped as package data (`rootproof.store:migrations`)."""

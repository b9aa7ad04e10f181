"""Importers: other projects' incident cases as rootproof scenario folders (docs/importing.md)."""

from rootproof.scenarios.importers.opensre import CaseResult, ImportLimits, ImportResult, import_opensre

__all__ = ["CaseResult", "ImportLimits", "ImportResult", "import_opensre"]

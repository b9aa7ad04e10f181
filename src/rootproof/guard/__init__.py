"""The release gate: EvidenceGuard (code), SemanticGuard (support), SafeFallback and release."""

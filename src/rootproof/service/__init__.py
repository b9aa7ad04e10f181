"""The team service: `rootproof serve` (docs/service.md)."""

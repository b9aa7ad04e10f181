"""Observability: OpenTelemetry tracing of runs (`rootproof.observability.otel`; docs/observability.md)."""

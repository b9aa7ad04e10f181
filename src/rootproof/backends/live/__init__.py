"""Live backends: read-only views of the user's PostgreSQL, Redis, nginx, log files, Loki and
Prometheus, returning the snapshot backend's result shapes with `data_source: live:<target>`."""

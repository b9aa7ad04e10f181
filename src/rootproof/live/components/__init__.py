"""The components of the live environment, one module each, and the table of them in start order."""

from __future__ import annotations

from rootproof.live.components.base import Component, Health, Started
from rootproof.live.components.nginx import NginxComponent
from rootproof.live.components.orders import LoadComponent, OrderServiceComponent
from rootproof.live.components.postgres import PostgresComponent
from rootproof.live.components.prometheus import (
    PostgresExporterComponent,
    PrometheusComponent,
    RedisExporterComponent,
)
from rootproof.live.components.redis import RedisComponent
from rootproof.live.layout import ComponentName

__all__ = ["COMPONENT_TYPES", "Component", "Health", "Started", "component"]

COMPONENT_TYPES: dict[ComponentName, type[Component]] = {
    "postgres": PostgresComponent,
    "redis": RedisComponent,
    "order_service": OrderServiceComponent,
    "nginx": NginxComponent,
    "postgres_exporter": PostgresExporterComponent,
    "redis_exporter": RedisExporterComponent,
    "prometheus": PrometheusComponent,
    "load": LoadComponent,
}
"""Every component's class, keyed and ordered as `rootproof.live.layout.COMPONENTS`."""


def component(name: ComponentName) -> Component:
    """The component called `name` (components keep no state: a new instance is as good as any)."""
    return COMPONENT_TYPES[name]()

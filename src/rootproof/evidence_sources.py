"""Evidence sources → the taxonomy components they are able to observe (docs/guard-rules.md, "Evidence sources").

One table, `SOURCE_RULES`, read top to bottom per tool: the first row whose pattern matches
decides. The EvidenceGuard uses it for "from the component at fault" (ROOT_CAUSE_UNCORROBORATED)
and "able to observe that component" (RULED_OUT_UNTESTED); the offline planner reads the same
table, so what the planner confirms and what the guard accepts never drift apart.

- `observed_components(tool, kind, ref_text)`: what a ref from this source can observe — by
  tool and kind for the inspectors, by metric family (the metric name of the ref) for
  `query_metrics`, by the entry's service and source for `query_logs`. Knowledge observes nothing.
- `names_component(ref_text)`: the components a *client's error* in the text names (a log entry
  at WARN or above whose message carries a driver exception or the component's own error text,
  such as `redis.exceptions.ConnectionError` or `UnknownHostException`). Matched outside the
  ref's untrusted spans only, so a planted request URL names nothing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from rootproof.boundary.provenance import outside_spans, untrusted_spans
from rootproof.taxonomy import COMPONENTS, is_namespaced
from rootproof.tools.refs import parse_log_ref

__all__ = [
    "CLIENT_ERRORS",
    "SOURCE_RULES",
    "SourceRule",
    "from_component",
    "names_component",
    "observed_components",
    "observes",
]


@dataclass(frozen=True, kw_only=True)
class SourceRule:
    """One row of the evidence-source table."""

    tool: str
    """The tool whose refs the row classifies."""
    selector: str
    """What the pattern is matched against: `kind`, `metric` (the ref's metric name), `log`
    (the entry's service and source, `service [source]`) or `any`."""
    pattern: str
    """A case-insensitive regular expression (searched, not anchored unless it says so)."""
    components: frozenset[str]
    """The taxonomy components a ref of this source is able to observe."""
    doc: str
    """How the row reads in docs/guard-rules.md."""

    def __post_init__(self) -> None:
        unknown = self.components - COMPONENTS
        if unknown:
            raise ValueError(f"evidence source {self.doc!r}: unknown components {sorted(unknown)}")


def _r(tool: str, selector: str, pattern: str, components: set[str], doc: str) -> SourceRule:
    return SourceRule(
        tool=tool, selector=selector, pattern=pattern, components=frozenset(components), doc=doc
    )


_APP = {"application", "connection_pool", "jvm"}

SOURCE_RULES: tuple[SourceRule, ...] = (
    _r(
        "inspect_postgres",
        "kind",
        r"^activity$",
        {"postgresql", "connection_pool"},
        "kind activity (sessions and who holds them)",
    ),
    _r(
        "inspect_postgres",
        "kind",
        r"^(wait_events|load_by_user|load_by_host)$",
        {"postgresql", "connection_pool"},
        "kinds wait_events, load_by_user, load_by_host (what the sessions wait on, which clients hold them)",
    ),
    _r("inspect_postgres", "any", r"", {"postgresql"}, "every other kind"),
    _r("inspect_redis", "any", r"", {"redis"}, "every kind"),
    _r("inspect_nginx", "any", r"", {"nginx"}, "every kind"),
    _r("lookup_knowledge", "any", r"", set(), "knowledge cards observe nothing of this incident"),
    # query_metrics: by metric family, the metric name of the ref (`name{labels} first=…`).
    _r(
        "query_metrics",
        "metric",
        r"^pg_stat_activity",
        {"postgresql", "connection_pool"},
        "`pg_stat_activity*`",
    ),
    _r("query_metrics", "metric", r"^pg_", {"postgresql"}, "`pg_*`"),
    # A managed database's provider metrics (CloudWatch AWS/RDS, Datadog, New Relic, Cloud SQL,
    # Azure Monitor), by their own names.
    _r(
        "query_metrics",
        "metric",
        r"^(DatabaseConnections$|aws\.rds\.database_connections|postgresql\.(connections|percent_usage_connections)"
        r"|provider\.databaseConnections|cloudsql\.googleapis\.com/database/postgresql/num_backends|active_connections$)",
        {"postgresql", "mysql", "connection_pool"},
        "a managed database's connection count (`DatabaseConnections`, `aws.rds.database_connections`, `postgresql.connections`, `active_connections`)",
    ),
    _r(
        "query_metrics",
        "metric",
        r"^((CPUUtilization|FreeStorageSpace|FreeableMemory|ReadIOPS|WriteIOPS|ReadLatency|WriteLatency|ReadThroughput"
        r"|WriteThroughput|ReplicaLag|AuroraReplicaLag|DiskQueueDepth|TransactionLogsGeneration|MaximumUsedTransactionIDs"
        r"|DBLoad|DBLoadCPU|DBLoadNonCPU|CommitLatency|CommitThroughput|SwapUsage|BinLogDiskUsage|OldestReplicationSlotLag)$"
        r"|aws\.rds\.|provider\.[a-z]+[A-Z]\w*\.(Average|Maximum|Minimum|Sum)$|postgresql\.|cloudsql\.googleapis\.com/database/|db\.load)",
        {"postgresql", "mysql", "host", "disk"},
        "a managed database instance's own metrics (CloudWatch AWS/RDS names such as `CPUUtilization`, `FreeStorageSpace`, `ReplicaLag`; `aws.rds.*`, `postgresql.*`, New Relic `provider.*`, Cloud SQL `cloudsql.googleapis.com/database/*`, Performance Insights `db.load*`)",
    ),
    _r("query_metrics", "metric", r"^redis_", {"redis"}, "`redis_*`"),
    _r("query_metrics", "metric", r"^nginx_", {"nginx"}, "`nginx_*`"),
    _r("query_metrics", "metric", r"^mysql_", {"mysql"}, "`mysql_*`"),
    _r(
        "query_metrics",
        "metric",
        r"^(hikaricp_|pgbouncer_)|pool",
        {"connection_pool"},
        "`hikaricp_*`, `pgbouncer_*`, `*pool*`",
    ),
    _r("query_metrics", "metric", r"^jvm_", {"jvm"}, "`jvm_*`"),
    _r("query_metrics", "metric", r"^(kafka_|rabbitmq_)", {"message_queue"}, "`kafka_*`, `rabbitmq_*`"),
    _r("query_metrics", "metric", r"^(kube_|container_)", {"kubernetes"}, "`kube_*`, `container_*`"),
    _r("query_metrics", "metric", r"cert|ssl|tls", {"tls"}, "`*cert*`, `*ssl*`, `*tls*`"),
    _r("query_metrics", "metric", r"^coredns_|dns", {"dns"}, "`coredns_*`, `*dns*`"),
    _r("query_metrics", "metric", r"^node_filesystem|disk", {"disk"}, "`node_filesystem*`, `*disk*`"),
    _r("query_metrics", "metric", r"^(node_network|probe_)", {"network"}, "`node_network*`, `probe_*`"),
    _r(
        "query_metrics",
        "metric",
        r"^(node_|process_|namedprocess_)|cpu",
        {"host"},
        "`node_*`, `process_*`, `namedprocess_*`, `*cpu*`",
    ),
    _r("query_metrics", "metric", r"^up$", {"application", "host"}, "`up` (the scrape target answers)"),
    _r(
        "query_metrics",
        "metric",
        r"",
        {"application"},
        "any other metric (`http_*`, `executor_*`, a service's own)",
    ),
    # query_logs: by the entry's service and source (`service [source]`).
    _r(
        "query_logs",
        "log",
        r"pgbouncer|pgpool|odyssey",
        {"connection_pool", "postgresql"},
        "pgbouncer, pgpool",
    ),
    _r(
        "query_logs",
        "log",
        r"postgres|^pg[-_]",
        {"postgresql"},
        "a PostgreSQL server log (`postgresql-*.log`, service `postgres*`, `pg-*`)",
    ),
    _r(
        "query_logs",
        "log",
        r"\[(aws_)?rds[_-]?events?\]|\[aurora|cloud_?sql|\[azure_(postgres|mysql)",
        {"postgresql", "mysql"},
        "a cloud provider's events about a managed database instance (`aws_rds_events`, Cloud SQL operations, Azure Database activity)",
    ),
    _r("query_logs", "log", r"redis|sentinel", {"redis"}, "a Redis server log"),
    _r("query_logs", "log", r"nginx|ingress|envoy|haproxy", {"nginx"}, "an nginx (or other proxy) log"),
    _r(
        "query_logs",
        "log",
        r"mysql|mariadb",
        {"mysql"},
        "a MySQL / MariaDB server log (`mysqld`, `mariadb-error.log`)",
    ),
    _r(
        "query_logs",
        "log",
        r"kern|syslog|\[messages\]|journal|dmesg",
        {"host", "disk", "network"},
        "kernel and syslog (`kern.log`, `syslog`, `messages`, `journal`)",
    ),
    _r(
        "query_logs",
        "log",
        r"coredns|\bdns\b|unbound|\bnamed\b",
        {"dns"},
        "a DNS server log (CoreDNS, unbound, named)",
    ),
    _r("query_logs", "log", r"\[gc(\.log)?\]|\bgc\.log", {"jvm"}, "a JVM GC log (`gc.log`)"),
    _r(
        "query_logs",
        "log",
        r"kube|kubelet|\[events\]",
        {"kubernetes"},
        "Kubernetes events, kubelet and audit logs",
    ),
    _r(
        "query_logs",
        "log",
        r"cert-manager|certbot|acme",
        {"tls"},
        "certificate managers (cert-manager, certbot)",
    ),
    _r(
        "query_logs",
        "log",
        r"kafka|rabbitmq|zookeeper|broker",
        {"message_queue"},
        "a Kafka / RabbitMQ broker log",
    ),
    _r(
        "query_logs",
        "log",
        r"deploy|config|flags|rollout|argocd|helm|ansible",
        {"configuration"},
        "deployers, config and feature-flag audit logs",
    ),
    _r(
        "query_logs",
        "log",
        r"alertmanager|node-exporter|prometheus",
        {"host", "disk"},
        "node alerts (node-exporter through Alertmanager)",
    ),
    _r(
        "query_logs",
        "log",
        r"fluent-?bit|fluentd|filebeat|vector|promtail",
        {"host"},
        "log shippers on a host",
    ),
    _r("query_logs", "log", r"", _APP, "an application's own log"),
)
"""The evidence-source table (first matching row per tool decides; docs/guard-rules.md renders it)."""

_COMPILED = [(r, re.compile(r.pattern, re.I)) for r in SOURCE_RULES]
_METRIC_NAME = re.compile(r"^[^\s{]+")


def observed_components(tool: str, kind: str | None, ref_text: str) -> frozenset[str]:
    """The taxonomy components that a ref from this source is able to observe (∅ if unknown)."""
    subject: dict[str, str] = {"kind": kind or "", "any": ""}
    if tool == "query_metrics":
        m = _METRIC_NAME.match(ref_text)
        subject["metric"] = m.group(0) if m else ""
    elif tool == "query_logs":
        log = parse_log_ref(ref_text)
        if log is None:
            return frozenset()
        subject["log"] = f"{log.service} [{log.source}]"
    for rule, pat in _COMPILED:
        if rule.tool != tool:
            continue
        value = subject.get(rule.selector)
        if value is not None and pat.search(value):
            return rule.components
    return frozenset()


CLIENT_ERRORS: tuple[tuple[str, str, str], ...] = (
    (
        "redis",
        r"\bredis\b|jedis|lettuce|\bMISCONF\b|OOM command not allowed",
        "`redis.exceptions.*`, Jedis, Lettuce, `MISCONF`",
    ),
    (
        "postgresql",
        r"PSQLException|org\.postgresql|psycopg(?!_pool|\.pool)|asyncpg|\bpq: |\bPG::|\bpostgres(?:ql)?\b|SQLSTATE\[?(?:08|53|55|57|40P)",
        "`PSQLException`, `psycopg`, `asyncpg`, `pq:`, `postgres`",
    ),
    (
        "mysql",
        r"pymysql|MySQLdb|\bmysql\b|mariadb|\bERROR \d{4} \(\w{5}\)|\(\d{4}, '",
        "`pymysql`, `MySQLdb`, `mysql`, `ERROR 1040 (08004)`",
    ),
    (
        "connection_pool",
        r"HikariPool|HikariCP|QueuePool|psycopg[._]pool|connection pool|pool exhausted|SQLTransientConnectionException|Could not open JDBC Connection|\bc3p0\b|pgbouncer",
        "`HikariPool`, `QueuePool`, `psycopg.pool`, `SQLTransientConnectionException`",
    ),
    (
        "nginx",
        r"\bnginx\b|while (?:reading response header from|connecting to) upstream|no live upstreams|\b50[24] (?:Bad Gateway|Gateway Time-?out)",
        "`nginx`, `… while connecting to upstream`, `502 Bad Gateway`",
    ),
    (
        "dns",
        r"UnknownHostException|getaddrinfo|ENOTFOUND|EAI_AGAIN|name resolution|Name or service not known|NameResolutionError|no such host|could not translate host name|SERVFAIL|NXDOMAIN",
        "`UnknownHostException`, `getaddrinfo`, `ENOTFOUND`, `Temporary failure in name resolution`",
    ),
    (
        "tls",
        r"SSLHandshake|SSLError|\bcertificate\b|\bx509\b|CERTIFICATE_VERIFY_FAILED|\btls:|handshake failure",
        "`SSLHandshakeException`, `certificate`, `x509`, `tls:`",
    ),
    (
        "jvm",
        r"java\.lang\.OutOfMemoryError|OutOfMemoryError|GC overhead limit",
        "`java.lang.OutOfMemoryError`, `GC overhead limit`",
    ),
    (
        "message_queue",
        r"org\.apache\.kafka|\bkafka\b|rabbitmq|\bamqp\b|CommitFailedException",
        "`org.apache.kafka`, `CommitFailedException`, `amqp`",
    ),
    (
        "disk",
        r"No space left on device|\bENOSPC\b|DiskFull|Read-only file system|disk (?:is )?full",
        "`No space left on device`, `ENOSPC`, `Read-only file system`",
    ),
    (
        "network",
        r"No route to host|Network is unreachable|EHOSTUNREACH|ENETUNREACH",
        "`No route to host`, `Network is unreachable`",
    ),
    (
        "kubernetes",
        r"CrashLoopBackOff|OOMKilled|Back-off restarting|ImagePullBackOff|\bkubelet\b",
        "`CrashLoopBackOff`, `OOMKilled`, `Back-off restarting`",
    ),
    (
        "application",
        r"RejectedExecutionException|TaskRejectedException|thread pool is exhausted|queue (?:is )?full",
        "`RejectedExecutionException`, `TaskRejectedException`",
    ),
)
"""(component, pattern, doc): what a client's error must say to name a component."""

_CLIENT = [(c, re.compile(p, re.I)) for c, p, _ in CLIENT_ERRORS]
_SEVERE_LEVELS = frozenset(
    {"WARN", "WARNING", "ERROR", "FATAL", "CRITICAL", "CRIT", "ALERT", "EMERG", "PANIC", "SEVERE"}
)
# Raw log lines (inspector kinds): nginx `[error]`, PostgreSQL `ERROR:`, MariaDB `[Warning]`, Redis `#`.
_RAW_SEVERE = re.compile(
    r"\[(?:warn|error|crit|alert|emerg)\]|\b(?:WARNING|ERROR|FATAL|PANIC):|\[(?:Warning|ERROR)\]|^\d+:[MSCX] .{10,30} # "
)


def names_component(
    ref_text: str, *, spans: Sequence[Sequence[int]] | None = None, only: str | None = None
) -> frozenset[str]:
    """Components a client's error in the text names (WARN or above; outside untrusted spans).

    `spans` are the ref's untrusted spans when the caller already computed them from the text;
    `only` tests that one component (the answer is it or nothing), for callers that need no more.
    Short texts asked without `spans` are remembered (a planner asks again at every step).
    """
    if spans is None and len(ref_text) <= 8192:
        found = _names_cached(ref_text)
        return found if only is None else found & {only}
    return _names_component(ref_text, spans, only)


def _names_component(ref_text: str, spans: Sequence[Sequence[int]] | None, only: str | None) -> frozenset[str]:
    log = parse_log_ref(ref_text)
    if log is not None:
        if log.level.upper() not in _SEVERE_LEVELS:
            return frozenset()
        tool = "query_logs"
    elif _RAW_SEVERE.search(ref_text):
        tool = "inspect_nginx"  # any raw-line tool: the span rules depend on the line, not the tool
    else:
        return frozenset()
    text = outside_spans(ref_text, untrusted_spans(tool, ref_text) if spans is None else spans)
    if log is not None:
        text = text[len(ref_text) - len(log.message) :]
    return frozenset(c for c, pat in _CLIENT if (only is None or c == only) and pat.search(text))


@functools.lru_cache(maxsize=8192)
def _names_cached(ref_text: str) -> frozenset[str]:
    return _names_component(ref_text, None, None)


def _namespaced_word(component: str) -> re.Pattern[str]:
    """The name part of `<namespace>.<name>`, as a word, `_` matching `_`, `-`, `.` or a space."""
    name = component.partition(".")[2]
    body = r"[-_. ]?".join(re.escape(part) for part in name.split("_") if part)
    return re.compile(rf"(?<![a-z0-9]){body}(?![a-z0-9])", re.I)


def observes(component: str, tool: str, kind: str | None, ref_text: str) -> bool:
    """Whether a ref from this source is able to observe `component`.

    Built-in components: the table (`observed_components`). A namespaced component a user's card
    adds (`acme.ledger`, docs/taxonomy.md) has no row; it is observed by the logs of a service or
    source, and by the metrics, whose name carries its name part as a word (`ledger-service`,
    `ledger_postings_waiting`).
    """
    if not is_namespaced(component):
        return component in observed_components(tool, kind, ref_text)
    if tool == "query_logs":
        log = parse_log_ref(ref_text)
        return log is not None and _namespaced_word(component).search(f"{log.service} {log.source}") is not None
    if tool == "query_metrics":
        m = _METRIC_NAME.match(ref_text)
        return m is not None and _namespaced_word(component).search(m.group(0)) is not None
    return False


def from_component(
    component: str, tool: str, kind: str | None, ref_text: str, *, spans: Sequence[Sequence[int]] | None = None
) -> bool:
    """Whether the ref comes from a source observing `component` or is a client error naming it.

    A namespaced component is named by a client error (WARN or above) whose message says its
    name part as a word, outside untrusted spans.
    """
    if observes(component, tool, kind, ref_text):
        return True
    if not is_namespaced(component):
        return component in names_component(ref_text, spans=spans, only=component)
    log = parse_log_ref(ref_text)
    if log is None or log.level.upper() not in _SEVERE_LEVELS:
        return False
    text = outside_spans(ref_text, untrusted_spans("query_logs", ref_text) if spans is None else spans)
    return _namespaced_word(component).search(text[len(ref_text) - len(log.message) :]) is not None

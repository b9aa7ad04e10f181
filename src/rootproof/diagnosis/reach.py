"""Reach: a root cause reaches the impact it is said to explain.

A database server is shared: its log, its statistics and its metrics carry every database's
trouble. A deadlock storm in `billing` is real and loud, and it is no cause of `orders-api`
timing out when `orders-api` uses the database `orders` only. The verdict asks, before it
names a cause:

- where the cause's evidence is: the databases its records name (`user@db` in a server log
  line, `datname` of a row or a series) and the services (a log entry's service);
- where the impact is: the services whose records show impact in the window (`diagnosis.impact`)
  that are not the cause's own records (a client logging the deadlock it hit is the cause's
  evidence, not what it explains);
- which databases each such service uses, as the evidence shows it: its sessions
  (`application_name` and `datname` of a session row), and the server log lines of a user named
  like it (`orders_api@orders` for `orders-api`).

When the cause's evidence names databases, impact is seen in services whose databases are
known, none of those services is reached (named by the cause's evidence, or using one of its
databases) and at least one is known to use only other databases, the cause does not reach the
impact: it is a neighbour's trouble, never the root cause of what was asked about. Nothing is
decided from what is not known: a service whose databases the evidence does not show is left
out of the test.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from rootproof.agent.models.evidence_view import Hit, Observation
from rootproof.boundary.provenance import record_key
from rootproof.diagnosis.impact import impact_refs
from rootproof.tools.refs import parse_log_ref

__all__ = ["Gap", "scope_of", "service_databases", "unreached"]

_PG_USER_DB = re.compile(r"\[\d+\](?:-\d+)?\s+([A-Za-z_][\w.$-]*)@([A-Za-z_][\w.$-]*)\s")
_DB_FIELD = re.compile(r"\b(?:db|database|datname)=\"?([A-Za-z_][\w.$-]*)\"?")
_SERVICE_LABEL = re.compile(r"\b(?:service|app|application|job)=\"([^\"]{1,80})\"")
_SERVER_DBS = frozenset({"postgres", "template0", "template1", "[unknown]"})


def _norm(name: str) -> str:
    """A service, user or application name compared loosely (`orders_api` is `orders-api`)."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _json(text: str) -> dict[str, Any] | None:
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def scope_of(tool: str, text: str) -> tuple[set[str], set[str]]:
    """(databases, services) one record names."""
    dbs: set[str] = set()
    services: set[str] = set()
    row = _json(text)
    if row is not None:
        if isinstance(row.get("datname"), str) and row["datname"]:
            dbs.add(row["datname"])
        if isinstance(row.get("application_name"), str) and row["application_name"]:
            services.add(_norm(row["application_name"]))
        return dbs - _SERVER_DBS, services
    log = parse_log_ref(text) if tool == "query_logs" else None
    if log is not None and log.service:
        services.add(_norm(log.service))
    m = _PG_USER_DB.search(text)
    if m:
        dbs.add(m.group(2))
    dbs.update(_DB_FIELD.findall(text))
    if tool == "query_metrics":
        services.update(_norm(s) for s in _SERVICE_LABEL.findall(text))
    return dbs - _SERVER_DBS, services


def service_databases(observations: list[Observation]) -> dict[str, set[str]]:
    """The databases each service is seen using (normalised service name -> databases): its
    sessions, and the server log lines of a database user named like it."""
    found: dict[str, set[str]] = {}
    for o in observations:
        if not o.ready or o.tool != "inspect_postgres":
            continue
        for ref in o.refs:
            text = str(ref.get("text", ""))
            row = _json(text)
            if row is not None:
                app, db = row.get("application_name"), row.get("datname")
                if isinstance(app, str) and app and isinstance(db, str) and db and db not in _SERVER_DBS:
                    found.setdefault(_norm(app), set()).add(db)
                continue
            m = _PG_USER_DB.search(text)
            if m and m.group(2) not in _SERVER_DBS:
                found.setdefault(_norm(m.group(1)), set()).add(m.group(2))
    return found


@dataclass(frozen=True)
class Gap:
    """A cause that does not reach the impact: where its evidence is, and where the impact is."""

    databases: tuple[str, ...]
    services: tuple[str, ...]
    """The impacted services it does not reach (as they appear in the evidence)."""
    their_databases: tuple[str, ...]

    def reason(self) -> tuple[str, str]:
        """What the verdict says is missing (en, zh)."""
        dbs, svc, theirs = ", ".join(self.databases), ", ".join(self.services), ", ".join(self.their_databases)
        return (
            f"its evidence is about database {dbs}; the impact seen is in {svc}, which uses {theirs}: it does not reach what went wrong",
            f"其证据属于数据库 {dbs}；所见影响在 {svc}，而它使用的是 {theirs}：该原因触及不到出问题的地方",
        )


def unreached(hits: list[Hit], observations: list[Observation], alert: bool) -> Gap | None:
    """The gap between a cause (its scored `hits`) and the impact seen, None when it reaches it
    or the evidence cannot tell."""
    cause_dbs: set[str] = set()
    cause_services: set[str] = set()
    own = {(h.tool, record_key(h.text)) for h in hits}
    for h in hits:
        dbs, services = scope_of(h.tool, h.text)
        cause_dbs |= dbs
        cause_services |= services
    links = service_databases(observations)
    for service in cause_services:  # a client's errors are about the databases it uses
        cause_dbs |= links.get(service, set())
    if not cause_dbs:
        return None  # not scoped to a database: nothing to compare
    reached: set[str] = set()
    apart: dict[str, str] = {}
    for o, ref in impact_refs(observations, alert):
        text = str(ref.get("text", ""))
        if (o.tool, record_key(text)) in own:
            continue  # the cause's own record (a client logging the error it hit)
        _dbs, services = scope_of(o.tool, text)
        log = parse_log_ref(text) if o.tool == "query_logs" else None
        for service in services:
            if service in cause_services or links.get(service, set()) & cause_dbs:
                reached.add(service)
            elif links.get(service):
                apart[service] = log.service if log is not None and log.service else service
    if reached or not apart:
        return None
    theirs = sorted({db for s in apart for db in links[s]})
    return Gap(databases=tuple(sorted(cause_dbs)), services=tuple(sorted(set(apart.values()))), their_databases=tuple(theirs))

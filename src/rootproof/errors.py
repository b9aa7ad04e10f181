"""The rootproof error tree.

    RootproofError
    ├── ConfigError            a setting or input file is wrong (exit 2)
    │   ├── ScenarioError      a scenario folder or file is malformed (file, field, expected)
    │   ├── CardError          a knowledge card is malformed (file, field, expected)
    │   └── AlertError         an alert payload is malformed (the field at fault)
    ├── UsageError             the caller asked for something that does not exist (exit 2)
    ├── RunError               a run cannot continue
    │   ├── IllegalTransition  the lifecycle was asked for an edge it does not have
    │   ├── BudgetExhausted    a run budget (calls, tokens) is used up
    │   ├── DeadlineExceeded   the run's deadline passed
    │   └── RunCancelled       the run was cancelled
    ├── ModelError             the model could not produce a turn
    │   ├── ModelUnavailable   the provider stayed down after retries
    │   └── ModelOutputError   the provider answered with something unusable
    ├── BackendError           an evidence backend failed (a foreign error mapped at the seam)
    │   ├── BackendUnavailable its system cannot be reached: refused, auth, timeout (counts toward the breaker)
    │   └── BackendQueryError  the system answered but the query failed: bad query, missing extension (does not)
    ├── StoreError             the trace store failed
    │   └── StoreOpenError     it could not be opened: bad URL, missing driver, unreachable, old schema (exit 2)
    └── LiveEnvironmentError   the live benchmark's private environment failed: a component did not start,
        │                      a port was taken, a process would not stop (an infrastructure failure)
        └── LiveConfigError    it cannot be set up as configured (also a ConfigError: exit 2)
            └── MissingBinary  a server binary is not installed (names it and its Debian package)
"""

from __future__ import annotations

__all__ = [
    "AlertError",
    "BackendError",
    "BackendQueryError",
    "BackendUnavailable",
    "BudgetExhausted",
    "CardError",
    "ConfigError",
    "DeadlineExceeded",
    "IllegalTransition",
    "LiveConfigError",
    "LiveEnvironmentError",
    "MissingBinary",
    "ModelError",
    "ModelOutputError",
    "ModelUnavailable",
    "RootproofError",
    "RunCancelled",
    "RunError",
    "ScenarioError",
    "StoreError",
    "StoreOpenError",
    "UsageError",
]


class RootproofError(Exception):
    """Base of every error rootproof raises on purpose."""


class ConfigError(RootproofError):
    """A setting, variable or input file has a wrong value; the message names it."""


class ScenarioError(ConfigError):
    """A scenario folder is malformed; the message names the file, the field and what is expected."""


class CardError(ConfigError):
    """A knowledge card is malformed; the message names the file, the field and what is expected."""


class AlertError(ConfigError):
    """An alert payload is malformed; the message names the field at fault (`alerts[1].startsAt`)."""

    def __init__(self, field: str, problem: str, *, source: str = "") -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{source + ': ' if source else ''}{field}: {problem}")


class UsageError(RootproofError):
    """The caller asked for something that does not exist (unknown tool, run id, scenario)."""


class RunError(RootproofError):
    """A run cannot continue."""


class IllegalTransition(RunError):
    """The run lifecycle was asked for a transition it does not allow."""


class BudgetExhausted(RunError):
    """A run budget is used up; the message says which limit and the value reached."""


class DeadlineExceeded(RunError):
    """The run's deadline passed."""


class RunCancelled(RunError):
    """The run was cancelled (user, API, client disconnect)."""


class ModelError(RootproofError):
    """The model could not produce a usable turn; `status` is the provider's HTTP status, if it answered."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class ModelUnavailable(ModelError):
    """The model provider stayed down (429/5xx/timeouts) after retries."""


class ModelOutputError(ModelError):
    """The model answered with output that cannot be used (malformed JSON, wrong shape)."""


class BackendError(RootproofError):
    """An evidence backend failed; foreign errors become this at the seam."""


class BackendUnavailable(BackendError):
    """The backend's system cannot be reached: connection refused, authentication failed, a timeout.

    Counts toward the circuit breaker of that backend and target."""


class BackendRefused(BackendUnavailable):
    """The system refused rootproof's own connection and said why: a limit ran out (Redis `max
    number of clients reached`, PostgreSQL `sorry, too many clients already`). Backends turn it
    into a citable result (`refused`, ref `$.refused`), not a failed call: the refusal is
    evidence of the limit. Never worked around with other credentials."""

    def __init__(self, message: str, *, answer: str) -> None:
        super().__init__(message)
        self.answer = answer
        """The server's own words, one line."""


class BackendQueryError(BackendError):
    """The system answered but this query failed: a bad query, a missing extension, a missing file.

    Does not count toward the circuit breaker: the system is up."""


class StoreError(RootproofError):
    """The trace store failed."""


class StoreOpenError(StoreError):
    """The trace store could not be opened (bad URL, unknown dialect, missing driver, unreachable
    server, schema behind): a configuration problem, reported naming the setting."""


class LiveEnvironmentError(RootproofError):
    """The live benchmark's private environment could not be prepared, started or stopped.

    `component` names the part that failed (`postgres`, `nginx`, … or `environment` for the
    run folder itself); the message starts with it. An infrastructure failure, never an agent's:
    the live benchmark classifies a case that hits one `infra_invalid`."""

    def __init__(self, component: str, problem: str) -> None:
        self.component = component
        self.problem = problem
        super().__init__(f"{component}: {problem}")


class LiveConfigError(LiveEnvironmentError, ConfigError):
    """The environment cannot be set up as configured (a folder the server users cannot reach, a
    path too long for a socket): the fix is the caller's, so the CLI exits 2."""


class MissingBinary(LiveConfigError):
    """A server binary the environment needs is not installed; names it and its Debian package."""

    def __init__(self, component: str, binary: str, package: str, looked_at: str) -> None:
        self.binary = binary
        self.package = package
        super().__init__(component, f"{binary} is not installed (looked at {looked_at}); install the Debian package {package}: apt-get install {package}")

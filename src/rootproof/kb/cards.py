"""Knowledge cards: the models, the loader and its validation (docs/knowledge-cards.md).

A card is a Markdown file with YAML front matter. Every field is validated; a malformed card
raises `CardError` with one line `FILE: field FIELD: expected ...`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from rootproof.errors import CardError
from rootproof.limits import CARD_BYTES
from rootproof.taxonomy import (
    BUILTIN_TAXONOMY,
    NAMESPACE_RULE,
    CardDomain,
    LabelKind,
    Taxonomy,
    is_namespaced,
)
from rootproof.tools.base import MAX_SINCE, TOOLS, Scope, parse_since
from rootproof.tools.results import ROW_KINDS

__all__ = [
    "SIGNAL_TOOLS",
    "Alias",
    "Card",
    "Hypothesis",
    "Signal",
    "builtin_cards_dir",
    "card_taxonomy",
    "load_cards",
    "taxonomy_for",
    "parse_card",
]

SignalTool = Literal["query_logs", "query_metrics", "inspect_postgres", "inspect_redis", "inspect_nginx"]
SIGNAL_TOOLS: tuple[str, ...] = (
    "query_logs",
    "query_metrics",
    "inspect_postgres",
    "inspect_redis",
    "inspect_nginx",
)
"""The runtime tools a signal may name."""

_KINDS: dict[str, frozenset[str]] = {
    tool: frozenset(get_args(TOOLS[tool].args_model.model_fields["kind"].annotation))
    for tool in ("inspect_postgres", "inspect_redis", "inspect_nginx")
}
_TABLE_KINDS: dict[str, frozenset[str]] = {tool: frozenset(kinds) for tool, kinds in ROW_KINDS.items()}
_TABLE_KINDS_TEXT = "; ".join(f"{tool} {', '.join(kinds)}" for tool, kinds in ROW_KINDS.items())
_FIELD_KINDS: dict[str, frozenset[str]] = {
    "inspect_redis": frozenset({"info", "config"}),
    "inspect_postgres": frozenset({"settings"}),
    "inspect_nginx": frozenset({"status"}),
}
_LOG_KINDS: dict[str, frozenset[str]] = {
    "inspect_postgres": frozenset({"log"}),
    "inspect_redis": frozenset({"log", "slowlog"}),
    "inspect_nginx": frozenset({"error_log", "access_log"}),
}
_WHERE_OPS = (">=", "<=", "!=", ">", "<")

Scalar = str | int | float | bool


def _bad(field: str, expected: str) -> PydanticCustomError:
    return PydanticCustomError(
        "card_field", "{field}: expected {expected}", {"field": field, "expected": expected}
    )


def _sorted_list(values: frozenset[str]) -> str:
    return ", ".join(sorted(values))


_EXAMPLES: dict[LabelKind, str] = {
    "component": "acme.ledger",
    "mechanism": "acme.ledger_lock_wait",
    "recovery action": "acme.drain_ledger_queue",
}


def _label(kind: LabelKind) -> AfterValidator:
    """A taxonomy label of `kind`: built-in, or namespaced (a card may add those)."""
    builtin = BUILTIN_TAXONOMY.values(kind)
    example = _EXAMPLES[kind]

    def check(value: str) -> str:
        if value not in builtin and not is_namespaced(value):
            raise ValueError(
                f"a taxonomy {kind} (one of {', '.join(sorted(builtin))}) or a namespaced "
                f"{kind} such as {example} ({NAMESPACE_RULE})"
            )
        return value

    return AfterValidator(check)


ComponentLabel = Annotated[str, _label("component")]
MechanismLabel = Annotated[str, _label("mechanism")]
ActionLabel = Annotated[str, _label("recovery action")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Alias(_Strict):
    """Another name of a signal's metric or string: how another vendor or exporter spells it."""

    name: str = Field(min_length=1)
    """The other name: a metric name or glob, or a string to look for."""
    scale: float | None = Field(default=None, gt=0)
    """For a metric: this name's unit per canonical unit (CloudWatch `CPUUtilization` in percent
    for a canonical fraction: 100); every signal's threshold is multiplied by it."""
    threshold: float | None = None
    """For a metric: the threshold of the trend test on this name's series, in its own unit
    (overrides `scale`); default the signal's, scaled."""


def _alias(value: Any) -> Any:
    """A bare string is an alias with no threshold of its own."""
    return {"name": value} if isinstance(value, str) else value


AliasList = list[Annotated[Alias, BeforeValidator(_alias)]]


class Signal(_Strict):
    """One piece of evidence that supports a hypothesis, with exactly one test."""

    tool: SignalTool
    """The runtime tool whose observations are tested."""
    kind: str | None = None
    """Which kind of the `inspect_*` tool to look at (required there, absent elsewhere)."""
    weight: float = Field(default=1.0, gt=0)
    """How much the signal counts (> 0, default 1)."""
    match: list[str] | None = None
    """Test: one ref's text contains every string."""
    any_: list[str] | None = Field(default=None, alias="any")
    """Test: one ref's text contains at least one string."""
    where: dict[str, Scalar | list[Scalar]] | None = None
    """Test: one table row satisfies every condition."""
    field: str | None = None
    """Test: the named field compares true with `op` and `value`."""
    op: Literal["gt", "ge", "lt", "le", "eq", "ne", "contains"] | None = None
    """Comparison of the `field` test."""
    value: Scalar | None = None
    """Right-hand side of the `field` test."""
    metric: str | None = None
    """Test: a metric series matching this glob shows `trend`."""
    trend: Literal["rises", "falls", "high", "low", "stays_below", "stays_above", "flat", "ends_high", "ends_low"] | None = None
    """What the `metric` series must show."""
    threshold: float | None = None
    """Threshold of the `metric` test (default 0)."""
    query: str | None = None
    """What to send for `query_logs` and log-like kinds (default: the signal's strings, quoted)."""
    scope: Scope | None = None
    """`query_logs` scope."""
    since: str | None = None
    """How far back this signal's query looks (`30m`, `6h`, at most `7d`; default: the tool's
    window), for evidence that precedes the symptoms by nature: a pool's leak-detection
    warnings fire when a connection is first held too long, hours before the pool runs dry."""
    level: Literal["DEBUG", "INFO", "WARN", "ERROR", "FATAL"] | None = None
    """`query_logs` minimum level."""
    labels: dict[str, str] | None = None
    """`query_metrics` exact label matches."""
    discriminating: bool = False
    """True when seeing this signal tells the hypothesis apart from the alternatives its card
    names (`distinguishes_from`); False (default) for a symptom those alternatives share."""
    rules_out: bool = False
    """True for evidence *against* the hypothesis (the metric back to baseline, the storage
    expanded, errors flat): seen, its weight counts against it, and a draft cites it to rule
    the hypothesis out."""
    culprit: bool = False
    """True when a ref of this signal names the culprit (the blocking session, the top
    statement, the client holding connections): fetched once the hypothesis is confirmed."""
    aliases: dict[str, AliasList] = Field(default_factory=dict)
    """The other names of this signal's `metric` glob or `match`/`any` strings (the card's
    `aliases` are merged in): canonical → names (or {name, threshold})."""

    @property
    def test(self) -> Literal["match", "any", "where", "field", "metric"]:
        """Which test this signal carries."""
        if self.match is not None:
            return "match"
        if self.any_ is not None:
            return "any"
        if self.where is not None:
            return "where"
        if self.field is not None:
            return "field"
        return "metric"

    @model_validator(mode="after")
    def _check(self) -> Signal:
        tests = [
            name
            for name, v in (
                ("match", self.match),
                ("any", self.any_),
                ("where", self.where),
                ("field", self.field),
                ("metric", self.metric),
            )
            if v is not None
        ]
        if len(tests) != 1:
            got = ", ".join(tests) if tests else "none"
            raise _bad("test", f"exactly one of match, any, where, field, metric (got {got})")
        test = tests[0]
        tool = self.tool
        kinds = _KINDS.get(tool)
        if kinds is not None:
            if self.kind is None:
                raise _bad("kind", f"one of {_sorted_list(kinds)} (required for {tool})")
            if self.kind not in kinds:
                raise _bad("kind", f"one of {_sorted_list(kinds)} for {tool} (got {self.kind!r})")
        elif self.kind is not None:
            raise _bad("kind", f"no kind for {tool} (got {self.kind!r})")
        if self.since is not None:
            try:
                too_far = parse_since(self.since) > MAX_SINCE
            except ValueError as exc:
                raise _bad("since", str(exc)) from None
            if too_far:
                raise _bad("since", f"at most 7d (got {self.since[:40]!r})")
        for name in ("match", "any"):
            strings = self.match if name == "match" else self.any_
            if strings is not None and (not strings or any(not s.strip() for s in strings)):
                raise _bad(name, "a non-empty list of non-empty strings")
        if test == "where":
            allowed = _TABLE_KINDS.get(tool, frozenset())
            if self.kind not in allowed:
                raise _bad(
                    "where",
                    f"a table kind ({_TABLE_KINDS_TEXT}), not {tool} {self.kind or ''}".rstrip(),
                )
            assert self.where is not None
            if not self.where:
                raise _bad("where", "at least one condition")
            for key, cond in self.where.items():
                if isinstance(cond, str):
                    body = (
                        cond[2:] if cond[:2] in _WHERE_OPS else cond[1:] if cond[:1] in _WHERE_OPS else None
                    )
                    if body is not None and not body.strip():
                        raise _bad(f"where.{key}", f"a value after the operator (got {cond!r})")
                    if cond.startswith("~") and not cond[1:].strip():
                        raise _bad(f"where.{key}", f"a text to look for after ~ (got {cond!r})")
                    if body is not None and body.strip().endswith("%"):
                        try:
                            float(body.strip()[:-1])
                        except ValueError:
                            raise _bad(f"where.{key}", f"a number before % (got {cond!r})") from None
        if test == "field":
            allowed = _FIELD_KINDS.get(tool, frozenset())
            if self.kind not in allowed:
                raise _bad(
                    "field",
                    "an inspect_redis info or config, inspect_postgres settings or "
                    f"inspect_nginx status signal, not {tool} {self.kind or ''}".rstrip(),
                )
            if self.op is None:
                raise _bad("op", "one of contains, eq, ge, gt, le, lt, ne (required with field)")
            if self.value is None:
                raise _bad("value", "a scalar (required with field)")
        else:
            if self.op is not None:
                raise _bad("op", "no op without a field test")
            if self.value is not None:
                raise _bad("value", "no value without a field test")
        if test == "metric":
            if tool != "query_metrics":
                raise _bad("metric", f"a query_metrics signal (got {tool})")
            if self.trend is None:
                raise _bad(
                    "trend",
                    "one of rises, falls, high, low, stays_below, stays_above, flat, ends_high, ends_low (required with metric)",
                )
        else:
            if self.trend is not None:
                raise _bad("trend", "no trend without a metric test")
            if self.threshold is not None:
                raise _bad("threshold", "no threshold without a metric test")
        if self.query is not None and not (
            tool == "query_logs" or (self.kind is not None and self.kind in _LOG_KINDS.get(tool, frozenset()))
        ):
            raise _bad("query", "a query only for query_logs and log-like kinds")
        if (self.scope is not None or self.level is not None) and tool != "query_logs":
            raise _bad("scope" if self.scope is not None else "level", "scope and level only for query_logs")
        if self.labels is not None and tool != "query_metrics":
            raise _bad("labels", "labels only for query_metrics")
        if self.rules_out and self.discriminating:
            raise _bad("rules_out", "not both rules_out and discriminating (evidence against tells nothing apart)")
        if self.rules_out and self.culprit:
            raise _bad("culprit", "not both culprit and rules_out")
        names = self.names()
        for key, alts in self.aliases.items():
            if key not in names:
                raise _bad(
                    f"aliases.{key}",
                    f"the signal's metric glob or one of its match/any strings (got {key!r})",
                )
            for i, a in enumerate(alts):
                if not a.name.strip():
                    raise _bad(f"aliases.{key}[{i}]", "a non-empty name")
                for attr in ("threshold", "scale"):
                    if getattr(a, attr) is not None and test != "metric":
                        raise _bad(f"aliases.{key}[{i}].{attr}", f"a {attr} only for a metric signal's aliases")
        return self

    def names(self) -> list[str]:
        """What `aliases` may rename: the metric glob, or the match/any strings."""
        if self.metric is not None:
            return [self.metric]
        return list(self.match or self.any_ or [])

    def spellings(self, name: str) -> list[str]:
        """`name` and its aliases, canonical first."""
        return [name, *(a.name for a in self.aliases.get(name, ()) if a.name != name)]

    def metric_names(self) -> list[tuple[str, float | None]]:
        """(glob, threshold) of the metric test under every name: the canonical glob with the
        signal's threshold, then each alias with its own (default the signal's)."""
        if self.metric is None:
            return []
        out = [(self.metric, self.threshold)]
        for a in self.aliases.get(self.metric, ()):
            if a.name == self.metric:
                continue
            if a.threshold is not None:
                out.append((a.name, a.threshold))
            elif a.scale is not None and self.threshold is not None:
                out.append((a.name, self.threshold * a.scale))
            else:
                out.append((a.name, self.threshold))
        return out


class Hypothesis(_Strict):
    """A cause the offline planner may test, with the signals that support it."""

    component: ComponentLabel
    """Taxonomy component (built-in or namespaced)."""
    mechanism: MechanismLabel
    """Taxonomy mechanism (built-in or namespaced)."""
    signals: list[Signal] = Field(min_length=1)
    """Evidence that supports this hypothesis (at least one)."""
    distinguishes_from: list[str] = Field(default_factory=list)
    """`component/mechanism` pairs this card tells apart."""
    recovery: list[ActionLabel] = Field(default_factory=list)
    """Taxonomy recovery actions (built-in or namespaced), safest first."""
    explains: list[str] = Field(default_factory=list)
    """`component/mechanism` pairs whose symptoms this mechanism produces (its effects)."""

    @field_validator("distinguishes_from", "explains")
    @classmethod
    def _pairs(cls, value: list[str]) -> list[str]:
        for i, pair in enumerate(value):
            comp, sep, mech = pair.partition("/")
            known = (
                comp in BUILTIN_TAXONOMY.components or is_namespaced(comp),
                mech in BUILTIN_TAXONOMY.mechanisms or is_namespaced(mech),
            )
            if not sep or not all(known):
                raise _bad(
                    f"[{i}]",
                    "a taxonomy component/mechanism pair such as postgresql/slow_query, "
                    f"either part namespaced if a card declares it (got {pair!r})",
                )
        return value


class Card(_Strict):
    """One knowledge card: validated front matter, the Markdown body and where it came from."""

    id: str = Field(pattern=r"^[a-z0-9-]+$")
    """`[a-z0-9-]+`, equal to the file stem."""
    title: str = Field(min_length=1)
    """One line."""
    domain: CardDomain
    """The card's domain."""
    language: Literal["en", "zh"] = "en"
    """Language of title and body."""
    tags: list[str] = Field(default_factory=list)
    """Free tags."""
    identifiers: list[str] = Field(default_factory=list)
    """Exact strings for the L0 identifier index (error codes, log signatures, metric names)."""
    aliases: dict[str, AliasList] = Field(default_factory=dict)
    """Other names of the metric globs and match/any strings its signals use (CloudWatch,
    Datadog, New Relic, Prometheus exporters …): canonical → names (or {name, threshold});
    merged into every signal that uses the canonical name."""
    hypotheses: list[Hypothesis] = Field(default_factory=list)
    """What the offline planner may test."""
    body: str = ""
    """The Markdown text after the front matter."""
    path: Path = Path()
    """The file the card was read from."""

    @field_validator("title")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if "\n" in value.strip() or not value.strip():
            raise _bad("title", "one non-empty line")
        return value.strip()

    @field_validator("tags", "identifiers")
    @classmethod
    def _non_empty(cls, value: list[str]) -> list[str]:
        for s in value:
            if not s.strip():
                raise ValueError("a list of non-empty strings")
        return value

    @model_validator(mode="after")
    def _merge_aliases(self) -> Card:
        """Validate the card's `aliases` and merge them into the signals that use each name."""
        if not self.aliases:
            return self
        used: dict[str, bool] = {}
        for h in self.hypotheses:
            for sig in h.signals:
                for n in sig.names():
                    used[n] = used.get(n, False) or sig.metric is not None
        for key, alts in self.aliases.items():
            if key not in used:
                raise _bad(
                    f"aliases.{key}",
                    f"a metric glob or a match/any string of one of this card's signals (got {key!r})",
                )
            for i, a in enumerate(alts):
                if not a.name.strip():
                    raise _bad(f"aliases.{key}[{i}]", "a non-empty name")
                for attr in ("threshold", "scale"):
                    if getattr(a, attr) is not None and not used[key]:
                        raise _bad(
                            f"aliases.{key}[{i}].{attr}",
                            f"a {attr} only for aliases of a metric glob ({key!r} is a match/any string)",
                        )
        hyps: list[Hypothesis] = []
        for h in self.hypotheses:
            sigs: list[Signal] = []
            for sig in h.signals:
                extra = {n: self.aliases[n] for n in sig.names() if n in self.aliases}
                if not extra:
                    sigs.append(sig)
                    continue
                merged = {k: list(v) for k, v in sig.aliases.items()}
                for n, alts in extra.items():
                    have = {a.name for a in merged.get(n, [])}
                    merged.setdefault(n, []).extend(a for a in alts if a.name not in have)
                sigs.append(sig.model_copy(update={"aliases": merged}))
            hyps.append(h.model_copy(update={"signals": sigs}))
        object.__setattr__(self, "hypotheses", hyps)
        # Every name a card recognises is an identifier of it: a lookup naming a vendor's metric
        # (`aws.rds.database_connections`) finds the card as its canonical name would.
        names = [n for key, alts in self.aliases.items() for n in (key, *(a.name for a in alts)) if "*" not in n and "?" not in n]
        object.__setattr__(self, "identifiers", list(dict.fromkeys([*self.identifiers, *names])))
        return self


class _CardLoader(yaml.SafeLoader):
    """YAML loader where only `true`/`false` are booleans (`on`, `yes`, `off` stay strings), and
    anchors and aliases are refused (an alias can stand for gigabytes)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(
                None, None, "YAML anchors and aliases are not accepted in cards", event.start_mark
            )
        return super().compose_node(parent, index)


_CardLoader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_CardLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)

_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)(.*)\Z", re.S)


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(front matter)"


def _describe(err: Any) -> tuple[str, str]:
    """(field path, what is expected) of one pydantic error."""
    loc = tuple(err["loc"])
    etype = err["type"]
    ctx = err.get("ctx") or {}
    got = err.get("input")
    if etype == "card_field":
        sub = str(ctx["field"])
        base = _loc(loc)
        if not loc:
            return sub, str(ctx["expected"])
        return (f"{base}{sub}" if sub.startswith("[") else f"{base}.{sub}"), str(ctx["expected"])
    field = _loc(loc)
    if etype == "missing":
        return field, "a value (the field is required)"
    if etype == "extra_forbidden":
        return field, "no such field (unknown fields are errors; see docs/knowledge-cards.md)"
    if etype == "literal_error":
        return field, f"one of {ctx.get('expected')} (got {got!r})"
    if etype == "string_pattern_mismatch":
        return field, f"text matching {ctx.get('pattern')} (got {got!r})"
    if etype == "value_error":
        return field, f"{str(ctx.get('error', err['msg']))} (got {got!r})"
    msg = str(err["msg"])
    msg = msg.removeprefix("Input should be ").removeprefix("Value error, ")
    return field, f"{msg} (got {got!r})"


def parse_card(text: str, path: Path) -> Card:
    """Parse and validate one card's text; `path` names it in errors.

    The same text at the same path gives the same (unchanged) `Card` object again without being
    parsed again: every run of a process loads the knowledge base, and the YAML of its cards was
    two fifths of a snapshot diagnosis's CPU. A malformed card is parsed (and refused) each time."""
    return _parse_card(text, path)


@lru_cache(maxsize=1024)
def _parse_card(text: str, path: Path) -> Card:
    m = _FRONT.match(text.lstrip("\ufeff"))
    if not m:
        raise CardError(f"{path}: field (front matter): expected the file to start with '---', YAML, '---'")
    try:
        data = yaml.load(m.group(1), Loader=_CardLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise CardError(f"{path}: field (front matter): expected valid YAML ({exc})") from exc
    if not isinstance(data, dict):
        raise CardError(f"{path}: field (front matter): expected a mapping of fields")
    for reserved in ("body", "path"):
        if reserved in data:
            raise CardError(f"{path}: field {reserved}: expected no such field (unknown fields are errors)")
    try:
        card = Card.model_validate({**data, "body": m.group(2).strip(), "path": path})
    except ValidationError as exc:
        field, expected = _describe(exc.errors()[0])
        raise CardError(f"{path}: field {field}: expected {expected}") from None
    if card.id != path.stem:
        raise CardError(
            f"{path}: field id: expected the file name without .md ({path.stem!r}), got {card.id!r}"
        )
    if not card.body:
        raise CardError(f"{path}: field (body): expected Markdown text after the front matter")
    return card


def builtin_cards_dir() -> Path:
    """The folder of the built-in cards inside the installed package."""
    return Path(str(resources.files("rootproof.kb") / "cards"))


def _card_files(folder: Path, max_bytes: int) -> Iterator[Path]:
    if not folder.is_dir():
        raise CardError(f"{folder}: field (cards folder): expected an existing folder of .md cards")
    for p in sorted(folder.glob("*.md")):
        if p.name.lower() != "readme.md":
            if (size := p.stat().st_size) > max_bytes:
                raise CardError(
                    f"{p}: field (file): expected at most {max_bytes} bytes (ROOTPROOF_MAX_CARD_BYTES), got {size}"
                )
            yield p


def load_cards(
    extra_dirs: Sequence[Path] = (), *, builtin: bool = True, max_bytes: int = CARD_BYTES
) -> dict[str, Card]:
    """Load the built-in cards (unless `builtin=False`) and every `*.md` in `extra_dirs`.

    Raises `CardError` for a malformed card, a file above `max_bytes`
    (`Settings.max_card_bytes`) or an id defined twice.
    """
    folders: list[Path] = []
    if builtin:
        b = builtin_cards_dir()
        if b.is_dir():
            folders.append(b)
    folders.extend(Path(d) for d in extra_dirs)
    cards: dict[str, Card] = {}
    for folder in folders:
        for p in _card_files(folder, max_bytes):
            try:
                text = p.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                raise CardError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
            card = parse_card(text, p)
            if card.id in cards:
                raise CardError(
                    f"{p}: field id: expected a unique id ({card.id!r} is also {cards[card.id].path})"
                )
            cards[card.id] = card
    _check_pairs(cards.values(), card_taxonomy(cards.values()))
    return cards


def card_taxonomy(cards: Iterable[Card]) -> Taxonomy:
    """The built-in taxonomy plus every label the cards' hypotheses declare (docs/taxonomy.md)."""
    hypotheses = [h for card in cards for h in card.hypotheses]
    return BUILTIN_TAXONOMY.extended(
        components=(h.component for h in hypotheses),
        mechanisms=(h.mechanism for h in hypotheses),
        recovery_actions=(a for h in hypotheses for a in h.recovery),
    )


def taxonomy_for(cards_dir: Path | None) -> Taxonomy:
    """The taxonomy of a knowledge base: the built-in cards plus `cards_dir` (ROOTPROOF_CARDS_DIR)."""
    return card_taxonomy(load_cards([cards_dir] if cards_dir is not None else []).values())


def _check_pairs(cards: Iterable[Card], taxonomy: Taxonomy) -> None:
    """A namespaced label in `distinguishes_from` or `explains` must be declared by a loaded card."""
    for card in cards:
        for i, h in enumerate(card.hypotheses):
            for name in ("distinguishes_from", "explains"):
                for j, pair in enumerate(getattr(h, name)):
                    comp, _, mech = pair.partition("/")
                    wrong = taxonomy.unknown("component", comp) or taxonomy.unknown("mechanism", mech)
                    if wrong:
                        raise CardError(
                            f"{card.path}: field hypotheses[{i}].{name}[{j}]: expected a pair of known "
                            f"labels ({wrong})"
                        )

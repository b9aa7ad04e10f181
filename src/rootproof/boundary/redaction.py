"""Secret redaction for tool output, questions and alerts (docs/security.md).

Two layers find secret values in each line of a text, and every value found becomes `***`:

1. our patterns, which know where a secret sits in operational text and keep what surrounds it
   readable: connection strings (`scheme://user:***@host`, the password may hold `@`: the last
   `@` before the host ends it), `KEY=value` / `"key": "value"` / `key: value` for secret-like
   key names (`DB_PASSWORD`, `PGPASSWORD`, `aws_secret_access_key`, `client_secret`, …),
   authorization headers (`Authorization: Basic ***`, `Bearer ***`), SQL that sets a password
   (`ALTER USER … PASSWORD '***'`, `IDENTIFIED BY '***'`), private-key blocks, command-line
   passwords (`redis-cli -a`, `mysql -p`) and cloud or SaaS tokens by their prefixes;
2. the plugins of detect-secrets (Yelp's maintained secret scanner), run on the line after our
   patterns: AWS, Slack, GitHub, GitLab, Stripe, OpenAI, JWT, Twilio, SendGrid, Azure storage
   keys and more, its keyword detector, and its base64 high-entropy detector on quoted strings
   (UUIDs, sequential and templated strings are left alone, as detect-secrets' own filters do).
   Its hex high-entropy and public-IP detectors are not used: trace ids, transaction ids,
   digests and addresses are evidence.

`redact_value` walks JSON-like data: strings are redacted as text, and the string value of a
dict key that names a secret (`password`, `token`, `api_key`, `authorization`, …) becomes `***`.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["MASK", "is_secret_key", "redact", "redact_value"]

MASK = "***"
"""What a secret value becomes."""

# -- secret-like key names ---------------------------------------------------------------------
# A key is secret-like when it ends with one of these words (after an optional prefix such as
# `DB_`, `PG`, `aws_secret_`), optionally followed by a short qualifier (`_b64`, `_value`).
_LONG_WORDS = (
    r"password|passwd|passphrase|passcode|secret|token|credentials?|authorization"
    r"|api[_\-]?key|apikey|access[_\-]?key|secret[_\-]?key|private[_\-]?key|account[_\-]?key"
    r"|auth[_\-]?key|master[_\-]?key|signing[_\-]?key|encryption[_\-]?key|client[_\-]?key"
    r"|session[_\-]?key|sas[_\-]?key|requirepass|masterauth|masterpass"
    r"|密码|口令|密钥|秘钥|令牌"
)
# Short words count only as a whole component (`DB_PASS`, `MYSQL_PWD`, `REDISCLI_AUTH`, `sig`):
# glued to a prefix they are ordinary words (`bypass`, `passed`, `oauth2`, `design`).
_SHORT_WORDS = r"pass|pwd|auth|sig"
_QUALIFIER = r"(?:[_.\-]?(?:b64|base64|base|hash|value|enc|encrypted|plain|str|string|file_content))?"
_KEY = (
    rf"(?:[A-Za-z0-9_.\-]*?(?:{_LONG_WORDS})|(?:[A-Za-z0-9.\-]*[_.\-])?(?:{_SHORT_WORDS}))"
    rf"{_QUALIFIER}(?![A-Za-z0-9])"
)
_KEY_FULL = re.compile(
    rf"[A-Za-z0-9_.\-]*?(?:{_LONG_WORDS}){_QUALIFIER}|(?:[A-Za-z0-9.\-]*[_.\-])?(?:{_SHORT_WORDS}){_QUALIFIER}",
    re.I,
)
# Keys that look secret but name something public or a setting about secrets.
_NOT_SECRET_KEYS = frozenset(
    {
        "token_type",
        "auth_type",
        "auth_method",
        "passwd_file",
        "secret_name",
        "secretname",
        "token_uri",
        "auth_uri",
    }
)

# `PWD` and `OLDPWD` are the shell's working folders (`PWD=/srv/app`), `Pwd=` an ADO.NET or ODBC
# password: the key holds a secret unless its value is a path.
_PATH_KEYS = frozenset({"pwd", "oldpwd"})
_PATH_VALUE = re.compile(r"[/~\\]|[A-Za-z]:[/\\]")


def _path_value(key: str, value: str) -> bool:
    """True for `PWD=/srv/app`: a working-folder variable holding a path, not a password."""
    return key.strip().strip("\"'").casefold() in _PATH_KEYS and _PATH_VALUE.match(value) is not None


# A value: double-quoted (JSON escapes kept), JSON-in-a-string (\"…\"), single-quoted, or bare.
_VALUE = r"""(?:\\"(?P<ev>(?:[^"\\]|\\[^"])*)\\"|"(?P<dv>(?:[^"\\]|\\.)*)"|'(?P<sv>(?:[^'\\]|\\.|'')*)'|(?P<bv>[^\s,;"'<>(){}\[\]，；。、（）」】]+))"""
_ASSIGN = re.compile(
    rf"""(?P<key>(?<![A-Za-z0-9_.\-]){_KEY})(?P<kq>\\?["']?)(?P<sep>\s*(?::=|=>|==|=|:|：)\s*)(?P<scheme>(?:Bearer|Basic|Token|Digest|ApiKey|Key|Negotiate)\s+)?{_VALUE}""",
    re.I,
)
_HEADER = re.compile(
    r"(?P<pre>\b(?:proxy-)?authorization\s*[:=]\s*[\"']?(?:(?:Bearer|Basic|Token|Digest|ApiKey|Key|Negotiate|AWS4-HMAC-SHA256)\s+)?)(?P<v>[^\s\"',;]+(?:,\s*[A-Za-z]+=[^\s\"',;]+)*)",
    re.I,
)
_BEARER = re.compile(r"(?P<pre>\bBearer\s+)(?P<v>[A-Za-z0-9\-._~+/]{8,}=*)", re.I)
_BASIC = re.compile(r"(?P<pre>\bBasic\s+)(?P<v>[A-Za-z0-9+/]{6,}={0,2})(?![A-Za-z0-9+/=])")
_COOKIE = re.compile(r"(?P<pre>\b(?:set-)?cookie\s*:\s*)(?P<v>[^\r\n]+)", re.I)
_COOKIE_PAIR = re.compile(r"(?P<name>[^=;,\s]+)=(?P<v>[^;,\s]*)")
_COOKIE_ATTRS = frozenset(
    {"path", "domain", "expires", "max-age", "samesite", "secure", "httponly", "priority"}
)
# scheme://[user]:password@host — the password runs to the last `@` of the authority.
_URL = re.compile(
    r"(?P<pre>\b[A-Za-z][A-Za-z0-9+.\-]*://[^:/\s@'\"<>]*:)(?P<v>[^\s/?#'\"<>]*)@(?=[^\s@/?#'\"<>]+(?:[/?#\s'\"<>]|$))"
)
_SQL_PASSWORD = re.compile(
    r"(?P<pre>(?<![\w'\"])(?:(?:(?:ENCRYPTED|UNENCRYPTED)\s+)?PASSWORD(?:\s+|\s*\(\s*|\s*=\s*(?:PASSWORD\s*\(\s*)?)"
    r"|IDENTIFIED(?:\s+WITH\s+\w+)?\s+(?:BY|AS)\s+(?:PASSWORD\s*\(\s*)?))(?P<q>E?')(?P<v>(?:[^'\\]|\\.|'')*)'",
    re.I,
)
_REDIS_CONFIG = re.compile(
    r"(?P<pre>(?<![\w-])(?:requirepass|masterauth|masterpass)\s+\"?)(?P<v>[^\s\"]+)", re.I
)
_CLI_PASSWORD = re.compile(
    r"(?P<pre>\b(?:redis-cli|mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)\b[^\n]*?\s(?:-a\s+|-p(?=\S)|--pass(?:word)?[= ]))(?P<v>'[^']*'|\"[^\"]*\"|\S+)"
)
_REDIS_AUTH = re.compile(r'(?P<pre>"AUTH"(?:\s+"[^"]*")?\s+")(?P<v>[^"]+)"', re.I)
_SLACK_WEBHOOK = re.compile(
    r"(?P<pre>https://hooks\.slack\.com/(?:services|workflows|triggers)/)(?P<v>[A-Za-z0-9_/\-]+)"
)
# `PGPASSWORD hunter4444`, `passwd Puffin-Pw-42`: a secret-like name, blanks, and a value that
# reads as a password (`_secretish`), not as a word (`password authentication failed`).
_SPACED = re.compile(
    rf"""(?P<pre>(?<![A-Za-z0-9_.\-])(?P<key>{_KEY})[ \t]+)(?P<v>[^\s,;"'<>(){{}}\[\]，；。]+)""",
    re.I,
)
# "password is Chat-Plain-Pw-Kiwi", "the token was …", "密码是 …": a secret told in words.
_TOLD = re.compile(
    r"""(?P<pre>\b(?:password|passwd|passphrase|passcode|secret|token|api[ _\-]?key|access[ _\-]?key|pwd)s?"""
    r"""\s+(?:(?:is|was|are|were|has\s+been|had\s+been)(?:\s+now)?(?:\s+(?:set|changed|reset|updated))?(?:\s+to)?"""
    r"""|(?:set|changed|reset|updated)\s+to|=|:)\s+[\"'“‘]?)"""
    r"""(?P<v>[^\s"'”’,;]+)""",
    re.I,
)
_TOLD_ZH = re.compile(
    r"""(?P<pre>(?:密码|口令|密钥|秘钥|令牌)\s*(?:是|为|為|：|:|改成了?|改为|设为|设置为|换成了?)\s*[\"'“‘「]?)(?P<v>[^\s"'”’,;，；。」]+)"""
)
# SQL functions that hash or encrypt a password given as a literal: `md5('pw' || user)`,
# `crypt('pw', gen_salt('bf'))`, `sha2('pw', 256)`, `digest('pw', 'sha256')`.
_SQL_HASHED = re.compile(
    r"(?P<pre>(?<![\w.])(?:md5|crypt|sha1|sha2|sha224|sha256|sha384|sha512|digest|old_password)\s*\(\s*E?')(?P<v>(?:[^'\\]|\\.|'')+)'",
    re.I,
)
# Percent-encoded JSON and forms: `%22password%22%3A%22…%22`, `password%3D…`.
_PCT_JSON = re.compile(r"(?P<pre>%22(?P<key>[A-Za-z0-9_.\-]{2,64})%22(?:%20|\+)*%3A(?:%20|\+)*%22)(?P<v>.+?)(?=%22)", re.I)
_PCT_FORM = re.compile(r"(?P<pre>(?<![A-Za-z0-9_.\-])(?P<key>[A-Za-z0-9_.\-]{2,64})%3D)(?P<v>[^&\s%]*(?:%(?!26)[0-9A-Fa-f]{2}[^&\s%]*)*)", re.I)
_PEM_LINE = re.compile(r"[^\r\n]*[^\s][^\r\n]*")
_PEM = re.compile(
    r"(?P<pre>-----BEGIN (?P<kind>[A-Z0-9 ]*?)PRIVATE KEY(?: BLOCK)?-----)(?P<v>.*?)(?=-----END (?P=kind)PRIVATE KEY|\Z)",
    re.S,
)
# Cloud and SaaS tokens by their documented prefixes (where detect-secrets has a plugin too, its
# pattern is narrower: `ghp_` with exactly 36 characters, Slack tokens of digits only).
_TOKENS = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"sk-(?:proj-|ant-(?:api\d\d-)?|svcacct-)?[A-Za-z0-9_\-]{16,}"  # OpenAI, Anthropic
    r"|(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{10,}|whsec_[0-9A-Za-z]{16,}"  # Stripe
    r"|gh[pousr]_[A-Za-z0-9_]{20,}|github_pat_[A-Za-z0-9_]{22,}"  # GitHub
    r"|gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-[A-Za-z0-9_\-]{16,}"  # GitLab
    r"|xox[abposre]-[A-Za-z0-9\-]{10,}|xapp-\d-[A-Za-z0-9\-]{10,}"  # Slack
    r"|AIza[0-9A-Za-z_\-]{35}|ya29\.[0-9A-Za-z_\-]{20,}|GOCSPX-[0-9A-Za-z_\-]{20,}"  # Google
    r"|(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[0-9A-Z]{16}"  # AWS access key ids
    r"|LTAI[0-9A-Za-z]{12,24}|AKID[0-9A-Za-z]{32}"  # Alibaba Cloud, Tencent Cloud
    r"|hvs\.[A-Za-z0-9_\-]{20,}|dop_v1_[a-f0-9]{64}|npm_[A-Za-z0-9]{36}|pypi-[A-Za-z0-9_\-]{50,}"
    r"|SG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}"  # SendGrid
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"  # JWT
    r")"
)
# Cheap gate, run on the lower-cased line: a line that holds none of these cannot match any
# pattern or plugin, and is returned as it is (most log lines). The literals form one regex
# factored by prefix; the few shapes without a literal start are tested behind a cheaper check.
# tests/boundary/test_redaction.py proves the gate changes no result on the corpus, the built-in
# scenarios and the real logs.
_GATE_LITERALS = (
    ":// pass pwd secret token key auth cred bearer basic cookie identified sig -----begin contrase whsec"
    " sq0csp gr1348941 密码 口令 密钥 秘钥 令牌 sk- sk_ rk_ pk_ ghp_ gho_ ghu_ ghs_ ghr_ github_pat xox xapp-"
    " aiza ya29. gocspx akia asia abia acca a3t ltai akid hvs. dop_ npm_ pypi- sg. eyj akc glpat- gldt- glft-"
    " glsoat- glrt- glcbt- glimt- glptt- glagent- gloas- md5( crypt( sha1( sha2( sha224( sha256( sha384( sha512("
    " digest( old_password("
).split()


def _trie(words: list[str]) -> str:
    """One regex for many literals, factored by prefix (`p(?:ass|wd|k_)`): the engine then tries
    a branch per first character, not one per word (several times faster than `pass|pwd|pk_`).
    A word that another extends stands for both: the gate only asks whether one is present."""
    heads: dict[str, list[str]] = {}
    for w in words:
        heads.setdefault(w[0], []).append(w[1:])
    parts = []
    for head, tails in sorted(heads.items()):
        if "" in tails:
            parts.append(re.escape(head))
        elif len(tails) == 1:
            parts.append(re.escape(head + tails[0]))
        else:
            parts.append(re.escape(head) + "(?:" + _trie(tails) + ")")
    return "|".join(parts)


_GATE_WORDS = re.compile(_trie(_GATE_LITERALS))
_GATE_SHAPES = re.compile(r"ac[a-z0-9]{32}|sk[a-z0-9]{32}|ap[0-9a-f][a-z0-9]{8}|-us\d")
_GATE_QUOTED = re.compile(r"[\"'][A-Za-z0-9+/=_\-]{20,}[\"']")
_GATE_TELEGRAM = re.compile(r"\d{8,10}:[0-9A-Za-z_\-]{35}")
_GATE_DISCORD = re.compile(r"[MNO][A-Za-z\d_\-]{23,25}\.[A-Za-z\d_\-]{6}\.")


def _may_hold_secret(line: str) -> bool:
    low = line.lower()
    if _GATE_WORDS.search(low) or _GATE_SHAPES.search(low):
        return True
    if ("-p" in low or "-a " in low) and ("mysql" in low or "mariadb" in low or "redis-cli" in low):
        return True
    if ('"' in line or "'" in line) and _GATE_QUOTED.search(line):
        return True
    if ":" in line and _GATE_TELEGRAM.search(line):
        return True
    return "." in line and _GATE_DISCORD.search(line) is not None


# Values that are not secrets: placeholders, references, already-masked text, auth methods
# (`--auth=trust`, `auth_method: scram-sha-256`).
_AUTH_METHODS = frozenset(
    {
        "trust",
        "md5",
        "scram-sha-256",
        "peer",
        "ident",
        "reject",
        "cert",
        "ldap",
        "pam",
        "gss",
        "sspi",
        "radius",
        "oauth",
        "oauth2",
        "kerberos",
        "basic",
        "bearer",
        "digest",
        "required",
        "optional",
        "disabled",
        "enabled",
    }
)
_PLACEHOLDER = re.compile(
    r"\*+|x{3,}|\$\{?[A-Za-z_][\w.]*\}?|%[sd]|\?|\$\d+|<[^>]*>|\{\{.*\}\}|null|none|nil|undefined|true|false|redacted|\(redacted\)|\[redacted\]|[\-*.]?",
    re.I,
)


@functools.lru_cache(maxsize=4096)
def _secret_key(key: str) -> bool:
    k = key.strip().strip("\"'")
    return k.casefold() not in _NOT_SECRET_KEYS and _KEY_FULL.fullmatch(k) is not None


def is_secret_key(key: str) -> bool:
    """True when a dict key or variable name names a secret (`password`, `DB_TOKEN`, `api_key`)."""
    return _secret_key(key) if type(key) is str else _secret_key.__wrapped__(key)


def _keep(value: str) -> bool:
    """True for a value that is no secret (a placeholder, an auth method, already masked)."""
    return MASK in value or _PLACEHOLDER.fullmatch(value) is not None or value.casefold() in _AUTH_METHODS


def _mask_group(m: re.Match[str], group: str = "v") -> str:
    value = m.group(group)
    if value is None or _keep(value):
        return m.group(0)
    start, end = m.span(group)
    whole = m.group(0)
    base = m.start(0)
    return whole[: start - base] + MASK + whole[end - base :]


# `password=DB_PASSWORD`, `token=settings.api_token`: a name standing for the secret, not it.
_REFERENCE = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


def _assign(m: re.Match[str]) -> str:
    key = m.group("key")
    if key.casefold() in _NOT_SECRET_KEYS:
        return m.group(0)
    for group in ("ev", "dv", "sv", "bv"):
        value = m.group(group)
        if value is None:
            continue
        if _path_value(key, value):
            return m.group(0)
        if group == "bv" and m.group("sep") == ":" and not m.group("kq"):
            # `session:token:884120` is a name (a Redis key), not an assignment: YAML and log
            # `key: value` have a space, JSON has quotes.
            return m.group(0)
        if group == "bv" and _REFERENCE.fullmatch(value) and is_secret_key(value.rsplit(".", 1)[-1]):
            return m.group(0)
        if group == "bv" and "&" in value and m.start() > 0 and m.string[m.start() - 1] in "?&":
            # A query-string parameter ends at the next `&`.
            cut = value.index("&")
            start = m.start(group) - m.start()
            whole = m.group(0)
            return whole if _keep(value[:cut]) else whole[:start] + MASK + whole[start + cut :]
        return _mask_group(m, group)
    return m.group(0)


_SYMBOLS = frozenset("-_!@#$%^&*+=.~/")


def _secretish(value: str) -> bool:
    """A bare value that reads as a password or token, not as a word: 6 characters or more with a
    letter and a digit, or an upper-case letter after the first character beside lower-case ones
    (`hunter4444`, `Chat-Plain-Pw-Kiwi`; not `authentication`, `expired`, `Exchange`)."""
    v = value.strip(".:")
    if len(v) < 6 or _keep(v) or _PATH_VALUE.match(v) or "://" in v:
        return False
    if not any(c.isalpha() for c in v) or not all(c.isascii() for c in v) or not all(c.isalnum() or c in _SYMBOLS for c in v):
        return False
    if any(c.isdigit() for c in v):
        return not v.replace(".", "").replace("-", "").replace(":", "").isdigit()
    return any(c.islower() for c in v) and any(c.isupper() for c in v[1:])


_LONG_WORD = re.compile(_LONG_WORDS, re.I)


def _spaced(m: re.Match[str]) -> str:
    key = m.group("key")
    long_word = _LONG_WORD.search(key) is not None
    if not is_secret_key(key) or not (long_word or key.isupper()) or not _secretish(m.group("v")):
        return m.group(0)
    return m.group("pre") + MASK


def _told(m: re.Match[str]) -> str:
    return m.group("pre") + MASK if _secretish(m.group("v")) else m.group(0)


def _pct_key(m: re.Match[str]) -> str:
    return _mask_group(m) if is_secret_key(m.group("key")) else m.group(0)


def _basic(m: re.Match[str]) -> str:
    value = m.group("v")
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return m.group(0)
    # Only `user:password` credentials: "Basic configuration loaded" is prose.
    return m.group("pre") + MASK if b":" in decoded else m.group(0)


def _cookie(m: re.Match[str]) -> str:
    def pair(p: re.Match[str]) -> str:
        if p.group("name").casefold() in _COOKIE_ATTRS or _keep(p.group("v")):
            return p.group(0)
        return f"{p.group('name')}={MASK}"

    return m.group("pre") + _COOKIE_PAIR.sub(pair, m.group("v"))


_KEY_WORDS = (
    "pass",
    "pwd",
    "secret",
    "token",
    "key",
    "auth",
    "cred",
    "sig",
    "密码",
    "口令",
    "密钥",
    "秘钥",
    "令牌",
)
# (substrings of the lower-cased line of which one must be present, or () for always; pattern; replacement)
_SUBS: list[tuple[tuple[str, ...], re.Pattern[str], Callable[[re.Match[str]], str]]] = [
    (("hooks.slack.com",), _SLACK_WEBHOOK, _mask_group),
    (("://",), _URL, _mask_group),
    (("password", "identified"), _SQL_PASSWORD, _mask_group),
    (("authorization",), _HEADER, _mask_group),
    (("cookie",), _COOKIE, _cookie),
    # Before `key = value`: `password_hash = sha2('…', 256)` is a literal inside a call.
    (("md5", "crypt", "sha", "digest", "old_password"), _SQL_HASHED, _mask_group),
    (_KEY_WORDS, _ASSIGN, _assign),
    (("bearer",), _BEARER, _mask_group),
    (("basic",), _BASIC, _basic),
    (("redis-cli", "mysql", "mariadb"), _CLI_PASSWORD, _mask_group),
    (('"auth"',), _REDIS_AUTH, _mask_group),
    (("requirepass", "masterauth", "masterpass"), _REDIS_CONFIG, _mask_group),
    (("%3a", "%3d"), _PCT_JSON, _pct_key),
    (("%3d",), _PCT_FORM, _pct_key),
    (_KEY_WORDS, _SPACED, _spaced),
    (("pass", "pwd", "secret", "token", "key"), _TOLD, _told),
    (("密码", "口令", "密钥", "秘钥", "令牌"), _TOLD_ZH, _told),
    ((), _TOKENS, lambda m: MASK if not _keep(m.group(0)) else m.group(0)),
]


# -- detect-secrets ----------------------------------------------------------------------------
# Not used: hex high entropy and public IPs (evidence, see the module docstring); the private-key
# plugin, which finds only the BEGIN marker (the `_PEM` pattern masks the key itself); base64
# high entropy is used with a length floor, below.
_SKIPPED_PLUGINS = frozenset(
    {"HexHighEntropyString", "IPPublicDetector", "Base64HighEntropyString", "PrivateKeyDetector"}
)
# A plugin runs only on lines holding one of these (lower-cased) substrings, which each of its
# patterns needs; a plugin not listed runs on every line that passed the gate.
_PLUGIN_WORDS: dict[str, tuple[str, ...]] = {
    "KeywordDetector": ("key", "pass", "pwd", "secret", "contrase"),
    "CloudantDetector": ("key", "pass", "pw", "token", "cloudant"),
    "IbmCloudIamDetector": ("key", "pass", "pw"),
    "IbmCosHmacDetector": ("secret", "key"),
    "SoftlayerDetector": ("key", "pass", "pw", "softlayer"),
    "AWSKeyDetector": ("akia", "asia", "abia", "acca", "a3t", "aws"),
    "AzureStorageKeyDetector": ("accountkey",),
    "BasicAuthDetector": ("://",),
    "GitHubTokenDetector": ("gh",),
    "JwtTokenDetector": ("eyj",),
    "MailchimpDetector": ("-us",),
    "NpmDetector": ("_authtoken",),
    "OpenAIDetector": ("sk-",),
    "PypiTokenDetector": ("pypi-",),
    "SendGridDetector": ("sg.",),
    "SlackDetector": ("xox", "hooks.slack"),
    "SquareOAuthDetector": ("sq0csp",),
    "StripeDetector": ("k_live",),
    "TelegramBotTokenDetector": (":",),
}

_Scan = tuple[tuple[str, ...], Callable[[str], Iterator[str]]]


@functools.cache
def _detectors() -> tuple[list[_Scan], Callable[[str], bool]]:
    """detect-secrets' plugins (imported on first use) and the filter for what they yield."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.filters.heuristic import (
        is_potential_uuid,
        is_prefixed_with_dollar_sign,
        is_sequential_string,
        is_templated_secret,
    )
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString

    classes: list[type[Any]] = list(get_mapping_from_secret_type_to_class().values())
    scans: list[_Scan] = [
        (_PLUGIN_WORDS.get(c.__name__, ()), c().analyze_string)
        for c in classes
        if c.__name__ not in _SKIPPED_PLUGINS
    ]
    b64 = Base64HighEntropyString(limit=4.5)

    def high_entropy(line: str) -> Iterator[str]:
        # Quoted base64-like strings of 20+ characters above 4.5 bits of entropy per character
        # (detect-secrets' default limit); shorter quoted words are ordinary log text.
        for value in b64.analyze_string(line):
            if len(value) >= 20 and b64.calculate_shannon_entropy(value) > b64.entropy_limit:
                yield value

    scans.append((("'", '"'), high_entropy))

    def ignored(value: str) -> bool:
        return (
            len(value) < 4
            or _keep(value)
            or is_potential_uuid(value)
            or is_sequential_string(value)
            or is_templated_secret(value)
            or is_prefixed_with_dollar_sign(value)
        )

    return scans, ignored


_WINDOW = 4096
_OVERLAP = 512


def _windows(line: str) -> Iterator[str]:
    """A long line in overlapping windows: some detect-secrets patterns cost time quadratic in
    the length of a run of word characters (a 1 MB token took minutes); a secret shorter than
    the overlap lies whole in one window."""
    if len(line) <= _WINDOW:
        yield line
        return
    for start in range(0, len(line) - _OVERLAP, _WINDOW - _OVERLAP):
        yield line[start : start + _WINDOW]


def _redact_line(line: str, *, gate: bool = True) -> str:
    if gate and not _may_hold_secret(line):
        return line
    low = line.lower()
    for words, pattern, repl in _SUBS:
        if not gate or not words or any(w in low for w in words):
            line = pattern.sub(repl, line)
    scans, ignored = _detectors()
    low = line.lower()
    found: set[str] = set()
    for words, scan in scans:
        if not gate or not words or any(w in low for w in words):
            for chunk in _windows(line):
                found.update(v for v in scan(chunk) if isinstance(v, str) and not ignored(v))
    for value in sorted(found, key=len, reverse=True):
        line = line.replace(value, MASK)
    return line


# Results repeat short values (INFO fields, levels, services, label values): each distinct one is
# redacted once. A pure function of the text, so a cached answer is the answer.
_CACHE_MAX = 8192
_CACHE_TEXT = 512


def redact(text: str) -> str:
    """Mask every secret value in the text as `***`, keeping key names, schemes, users and hosts."""
    if not text:
        return text
    if type(text) is not str or len(text) > _CACHE_TEXT:
        return _redact(text)
    return _redact_cached(text)


def _redact(text: str) -> str:
    if "PRIVATE KEY" in text:
        # The key's body, line by line (the line breaks are kept, so are the BEGIN/END markers).
        text = _PEM.sub(lambda m: m.group("pre") + _PEM_LINE.sub(MASK, m.group("v")), text)
    if "\n" not in text:
        return _redact_line(text)
    return "\n".join(_redact_line(line) for line in text.split("\n"))


_NO_TEXT = frozenset({int, float, bool, type(None)})
"""Values that hold no text: left as they are (unless a secret-like key names them)."""


def redact_value(value: Any) -> Any:
    """Redact every string inside plain JSON data; a secret-like key's string or number becomes `***`."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [v if type(v) in _NO_TEXT else redact_value(v) for v in value]
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            # The checks are pure: the cheap cached key test runs first, the value's after it.
            if isinstance(k, str) and is_secret_key(k):
                secret = (isinstance(v, str) and v and not _keep(v)) or (
                    isinstance(v, int | float) and not isinstance(v, bool)
                )
                if secret and not (isinstance(v, str) and _path_value(k, v)):
                    out[k] = MASK
                    continue
            out[k] = v if type(v) in _NO_TEXT else redact_value(v)
        return out
    return value


_redact_cached = functools.lru_cache(maxsize=_CACHE_MAX)(_redact)
"""`_redact` of short texts, remembered (results repeat the same values: INFO fields, labels)."""

"""Database URLs fit to print: the one place a URL's secrets are hidden before a log line, an error,
`doctor`'s report, an HTML page or a child process's log line shows it.

It works on the text, not on a parsed URL, so that a string SQLAlchemy cannot parse (a mistyped
scheme, a non-numeric port, an unencoded `@` in the password) is masked all the same."""

from __future__ import annotations

import re
from urllib.parse import unquote

HIDDEN = "***"

# A scheme and what follows it up to the authority: "postgresql+psycopg://", and the mistyped
# "postgresql+psycopg//", "postgresql+psycopg:/" and "postgresql+psycopg:".
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*(?::/{0,3}|/{2})")
# A query parameter: its separator, its name, "=", and its value up to the next separator.
_PARAMETER = re.compile(r"([?&;])([^=&;?#]*)=([^&;#]*)")
# Names of query parameters that carry a secret (libpq's password and sslpassword, a driver's pwd,
# a token); matched case-insensitively, after percent-decoding, anywhere in the name.
_SECRET_NAME = re.compile(r"pass|pwd|secret|token", re.IGNORECASE)


def _password_span(rest: str) -> tuple[int, int] | None:
    """Where the password is in `rest` (the URL after its scheme): between the user's ":" and the
    LAST "@", so that an unencoded "@" in the password hides its tail as well. Without an "@", a
    port that is not a number: it may be a password whose "@host" went missing."""
    at = rest.rfind("@")
    if at >= 0:
        colon = rest.find(":", 0, at)
        return (colon + 1, at) if colon >= 0 else None
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    colon = authority.find(":")
    port = authority[colon + 1 :]
    return (colon + 1, len(authority)) if colon >= 0 and port and not port.isdigit() else None


def _after_scheme(url: str) -> int:
    scheme = _SCHEME.match(url)
    return scheme.end() if scheme else 0


def _mask_parameter(match: re.Match[str]) -> str:
    separator, name, value = match.groups()
    if _SECRET_NAME.search(unquote(name)) and value:
        return f"{separator}{name}={HIDDEN}"
    return match.group(0)


def mask_url(url: str) -> str:
    """`url` with its password and every secret-like query parameter hidden; works on any text."""
    start = _after_scheme(url)
    span = _password_span(url[start:])
    # A SQLite URL names a file, not a host: its ":memory:" is no port a password was mistyped into
    # (a passphrase before an "@", as SQLCipher's URLs carry one, is still hidden).
    if span is not None and url[:start].lower().startswith("sqlite") and "@" not in url[start:]:
        span = None
    if span is not None:
        url = url[: start + span[0]] + HIDDEN + url[start + span[1] :]
    return _PARAMETER.sub(_mask_parameter, url)


def secrets(url: str) -> list[str]:
    """The secrets `url` holds (its password, secret query values), as written and decoded, longest
    first; a password with an unencoded "@" also by its pieces (a driver names its tail as the host)."""
    found: list[str] = []
    start = _after_scheme(url)
    span = _password_span(url[start:])
    if span is not None:
        password = url[start + span[0] : start + span[1]]
        found += [password, *password.split("@")]
    found += [value for _, name, value in _PARAMETER.findall(url) if _SECRET_NAME.search(unquote(name))]
    return sorted({form for secret in found for form in (secret, unquote(secret)) if secret}, key=len, reverse=True)


# A secret this long is hidden wherever it stands in a message, even inside a longer word; a shorter one
# only where it stands apart from letters and digits: a password of "p" would otherwise turn the driver's
# "port" into "***ort", and such a short secret inside a word is a chance match, not an echo of it.
WHOLE_WORDS_BELOW = 6


def scrub(message: str, url: str) -> str:
    """`message` (a driver's error about `url`) with every secret of `url` in it hidden."""
    for secret in secrets(url):
        if len(secret) >= WHOLE_WORDS_BELOW:
            message = message.replace(secret, HIDDEN)
        else:
            message = re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", HIDDEN, message)
    return message

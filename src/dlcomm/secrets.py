"""Credentials in URIs stay secret: masked in every line dlcomm prints and everything it records.

A tracking URI may carry a password (``http://alice:pw@host:5000``, which MLflow's client sends as
HTTP basic authentication) or a token in its query (``?token=...``, a signed URL's ``sig=...``) or
its fragment (OAuth's ``#access_token=...``). :func:`mask` replaces those parts of every URI in a
text with ``***`` by their position in the raw text: a parameter is ``name=value`` between ``?``
or ``&`` (or ``#`` or ``&`` in the fragment) and the next ``&`` or the part's end, its name compared
decoded (``%73ig`` is ``sig``), its value masked as written, whatever its encoding
(``ab%2Bcd%3D``, ``a+b``); and every secret
:func:`remember` was given (from the command line and ``MLFLOW_TRACKING_URI``/``_PASSWORD``/``_TOKEN``,
so a secret that a library's error quotes outside its URI is masked too) wherever it appears.
The standard streams (:mod:`dlcomm.streams`) mask what is written to them; the MLflow records (params,
tags, run names) and the run's config.yaml are masked where they are written.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, unquote_plus, urlsplit

MASK = "***"
#: Query parameters whose value is a credential (case-insensitive).
SECRET_PARAMETERS = frozenset(
    {
        "token",
        "access_token",
        "auth",
        "password",
        "passwd",
        "pwd",
        "secret",
        "api_key",
        "apikey",
        "key",
        "sig",
        "signature",
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
        "sas",
        "code",
    }
)
#: A remembered secret shorter than this is masked only inside URIs (masking "ab" everywhere would garble the text).
SHORTEST_ANYWHERE = 4
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
_remembered: set[str] = set()


def _parameters(raw: str) -> list[tuple[str, str]]:
    """``(name, value)`` of each ``name=value`` of a raw query or fragment, as written."""
    return [(name, value) for name, eq, value in (piece.partition("=") for piece in raw.split("&")) if eq]


def _secret_name(name: str) -> bool:
    return unquote_plus(name).lower() in SECRET_PARAMETERS


def _split(uri: str) -> tuple[str, str, str] | None:
    """``(before the query, query, fragment)`` of ``uri`` as written (each without its ``?``/``#``),
    None when urlsplit cannot read it; the userinfo's password is in the first part."""
    try:
        parts = urlsplit(uri)
        parts.password  # noqa: B018 - raises for a bracket left open ("http://[::1")
    except ValueError:
        return None
    head, _, fragment = uri.partition("#")
    base, _, query = head.partition("?")
    return base, query, fragment


def credentials(text: str) -> list[str]:
    """The secrets in the URIs of ``text``: each userinfo's password and each secret query or
    fragment value, as written and (where it differs) decoded, so either form is masked when
    remembered."""
    found: list[str] = []
    for uri in _URI.findall(text):
        split = _split(uri)
        if split is None:
            continue
        _, query, fragment = split
        password = urlsplit(uri).password
        values = [password] if password else []
        values += [value for name, value in _parameters(query) + _parameters(fragment) if value and _secret_name(name)]
        for value in values:
            found += dict.fromkeys([value, unquote(value), unquote_plus(value)])
    return found


def remember(text: str) -> None:
    """Mask the secrets of ``text``'s URIs wherever they appear from now on."""
    _remembered.update(secret for secret in credentials(text) if len(secret) >= SHORTEST_ANYWHERE)


def remember_environment() -> None:
    """The secrets MLflow's client reads from the environment."""
    remember(os.environ.get("MLFLOW_TRACKING_URI", ""))
    for name in ("MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
        if len(os.environ.get(name, "")) >= SHORTEST_ANYWHERE:
            _remembered.add(os.environ[name])


def _mask_parameters(raw: str) -> str:
    """A raw query or fragment with every secret parameter's value replaced by ``***``."""
    pieces = []
    for piece in raw.split("&"):
        name, eq, value = piece.partition("=")
        pieces.append(f"{name}={MASK}" if eq and value and _secret_name(name) else piece)
    return "&".join(pieces)


def _mask_uri(match: re.Match[str]) -> str:
    uri = match.group(0)
    split = _split(uri)
    if split is None:  # not a URI urlsplit reads: left as it is (its remembered secrets still go)
        return uri
    base, query, fragment = split
    password = urlsplit(uri).password
    if password:
        base = base.replace(f":{password}@", f":{MASK}@", 1)
    return (
        base
        + ("?" + _mask_parameters(query) if "?" in uri.partition("#")[0] else "")
        + ("#" + _mask_parameters(fragment) if "#" in uri else "")
    )


def mask(text: str) -> str:
    """``text`` with every credential of its URIs and every remembered secret replaced by ``***``."""
    if "://" in text:
        text = _URI.sub(_mask_uri, text)
    for secret in _remembered:
        if secret in text:
            text = text.replace(secret, MASK)
    return text

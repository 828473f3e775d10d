"""Credentials in URIs stay secret: masked in every line dlcomm prints and everything it records.

A tracking URI may carry a password (``http://alice:pw@host:5000``, which MLflow's client sends as
HTTP basic authentication) or a token in its query (``?token=...``, a signed URL's ``sig=...``).
:func:`mask` replaces those parts of every URI in a text with ``***``, and every secret
:func:`remember` was given (from the command line and ``MLFLOW_TRACKING_URI``/``_PASSWORD``/``_TOKEN``,
so a secret that a library's error quotes outside its URI is masked too) wherever it appears.
The standard streams (:mod:`dlcomm.streams`) mask what is written to them; the MLflow records (params,
tags, run names) and the run's config.yaml are masked where they are written.
"""

from __future__ import annotations

import os
import re
from urllib.parse import parse_qsl, urlsplit

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


def credentials(text: str) -> list[str]:
    """The secrets in the URIs of ``text``: each userinfo's password and each secret query value."""
    found = []
    for uri in _URI.findall(text):
        try:
            parts = urlsplit(uri)
            parts.password  # noqa: B018 - raises for a bracket left open ("http://[::1")
        except ValueError:
            continue
        if parts.password:
            found.append(parts.password)
        found += [value for name, value in parse_qsl(parts.query) if name.lower() in SECRET_PARAMETERS and value]
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


def _mask_uri(match: re.Match[str]) -> str:
    uri = match.group(0)
    try:
        parts = urlsplit(uri)
        parts.password  # noqa: B018 - raises for a bracket left open
    except ValueError:  # not a URI urlsplit reads: left as it is (its remembered secrets still go)
        return uri
    if parts.password:
        uri = uri.replace(f":{parts.password}@", f":{MASK}@", 1)
    for name, value in parse_qsl(parts.query):
        if name.lower() in SECRET_PARAMETERS and value:
            uri = re.sub(rf"([?&]{re.escape(name)}=){re.escape(value)}(?=&|$)", rf"\g<1>{MASK}", uri, count=1)
    return uri


def mask(text: str) -> str:
    """``text`` with every credential of its URIs and every remembered secret replaced by ``***``."""
    if "://" in text:
        text = _URI.sub(_mask_uri, text)
    for secret in _remembered:
        if secret in text:
            text = text.replace(secret, MASK)
    return text

"""Python stand-ins for the Kubernetes CEL library functions Nightshift's CRDs use.

Only these, because only these appear in crds/*.yaml (tests/unit/test_validate_cli.py
fails when a rule calls anything else): `isURL(string)`, `url(string)` with
`.getScheme()` and `.getHostname()` (k8s.io/apiserver/pkg/cel/library/urls.go: Go's
url.ParseRequestURI), and `isCIDR(string)` (cidr.go: netip.ParsePrefix, no
IPv4-mapped IPv6). The standard CEL functions and macros (size, matches, startsWith,
all, exists, exists_one, filter, has, in) are cel-python's own.
"""

from __future__ import annotations

import ipaddress
import string
from dataclasses import dataclass

# Functions a CRD rule may call beyond standard CEL; the test checks the CRDs use no more.
LIBRARY = frozenset({"isURL", "url", "getScheme", "getHostname", "isCIDR"})

_UNRESERVED = set(string.ascii_letters + string.digits + "-_.~")
# Characters Go's shouldEscape lets through in a host (encodeHost).
_HOST_OK = _UNRESERVED | set("!$&'()*+,;=:[]<>\"")
_USERINFO_OK = _UNRESERVED | set("!$&'()*+,;=:%@")


class URLError(ValueError):
    pass


@dataclass(frozen=True)
class GoURL:
    scheme: str
    host: str
    path: str

    def hostname(self) -> str:
        host = self.host
        colon = host.rfind(":")
        if colon != -1 and _valid_optional_port(host[colon:]):
            host = host[:colon]
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        return host


def _valid_optional_port(port: str) -> bool:
    return port == "" or (port[0] == ":" and all(c in string.digits for c in port[1:]))


def _split_scheme(raw: str) -> tuple[str, str]:
    for i, c in enumerate(raw):
        if c.isascii() and c.isalpha():
            continue
        if c.isascii() and (c.isdigit() or c in "+-."):
            if i == 0:
                return "", raw
            continue
        if c == ":":
            if i == 0:
                raise URLError("missing protocol scheme")
            return raw[:i], raw[i + 1:]
        return "", raw
    return "", raw


def _check_escapes(s: str, allowed: set[str] | None) -> None:
    i = 0
    while i < len(s):
        c = s[i]
        if c == "%":
            if len(s) < i + 3 or not all(h in string.hexdigits for h in s[i + 1:i + 3]):
                raise URLError(f"invalid URL escape {s[i:i + 3]!r}")
            i += 3
            continue
        if allowed is not None and c.isascii() and c not in allowed:
            raise URLError(f"invalid character {c!r} in host name")
        i += 1


def _parse_host(host: str) -> None:
    if host.startswith("["):
        end = host.rfind("]")
        if end < 0:
            raise URLError("missing ']' in host")
        if not _valid_optional_port(host[end + 1:]):
            raise URLError(f"invalid port {host[end + 1:]!r} after host")
        return
    colon = host.rfind(":")
    if colon != -1 and not _valid_optional_port(host[colon:]):
        raise URLError(f"invalid port {host[colon:]!r} after host")
    _check_escapes(host, _HOST_OK)


def parse_request_uri(raw: str) -> GoURL:
    """Go's url.ParseRequestURI: an absolute URI or an absolute path, no fragment."""
    if raw == "":
        raise URLError("empty url")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        raise URLError("invalid control character in URL")
    if raw == "*":
        return GoURL("", "", "*")
    scheme, rest = _split_scheme(raw)
    rest = rest.split("?", 1)[0]
    if not rest.startswith("/"):
        if scheme:
            return GoURL(scheme.lower(), "", "")  # opaque, e.g. mailto:x
        raise URLError("invalid URI for request")
    host = ""
    if scheme and rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        rest = slash + path
        user, at, host = authority.rpartition("@")
        if not at:
            host = authority
        elif any(c.isascii() and c not in _USERINFO_OK for c in user):
            raise URLError("net/url: invalid userinfo")
        _parse_host(host)
    _check_escapes(rest, None)
    return GoURL(scheme.lower(), host, rest)


def is_url(s: str) -> bool:
    try:
        parse_request_uri(s)
    except URLError:
        return False
    return True


def is_cidr(s: str) -> bool:
    """netip.ParsePrefix: address/bits, bits in decimal without leading zeros, no zone."""
    addr, slash, bits = s.rpartition("/")
    if not slash or "%" in addr or not bits or any(c not in string.digits for c in bits):
        return False
    if len(bits) > 1 and bits[0] == "0":
        return False
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return False
    return int(bits) <= ip.max_prefixlen

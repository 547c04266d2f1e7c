"""The broker's rule for text it keeps from a client (internal/text), kept here
so that a nack's reason is what the broker would store: checked against
client/testdata/rules.json, which the broker's own tests check too."""

from __future__ import annotations

import re

MAX_REASON = 512
"""Bytes of a nack's reason sent; the broker keeps 1,024."""

_SURROGATES = re.compile("[\ud800-\udfff]+")


def bad_utf8_at(s: str) -> int:
    """The index of the first code point of s that UTF-8 cannot encode (a lone surrogate), or -1."""
    m = _SURROGATES.search(s)
    return m.start() if m else -1


def clean(s: str, limit: int = MAX_REASON) -> str:
    """s with every run of lone surrogates (bytes that were not UTF-8) replaced by
    one U+FFFD, cut to at most limit bytes of UTF-8 on a character boundary."""
    s = _SURROGATES.sub("\ufffd", s)
    b = s.encode("utf-8")
    if len(b) <= limit:
        return s
    cut = limit
    while cut > 0 and (b[cut] & 0xC0) == 0x80:
        cut -= 1
    return b[:cut].decode("utf-8")

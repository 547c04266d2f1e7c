"""The nack reason follows the broker's rule: client/testdata/rules.json holds
inputs and the broker's answers (the root module's tests check the file
against the broker itself)."""

import base64
import json

from brokerproc import ROOT

from harbinger._text import MAX_REASON, clean


def test_reason_agrees_with_broker_rule() -> None:
    rules = json.loads((ROOT / "client" / "testdata" / "rules.json").read_text())
    assert rules["MaxReason"] == MAX_REASON
    assert rules["Reasons"]
    for case in rules["Reasons"]:
        raw = base64.b64decode(case["In"])
        want = base64.b64decode(case["Out"]).decode("utf-8")
        # Bytes that are not UTF-8 reach Python as lone surrogates.
        got = clean(raw.decode("utf-8", "surrogateescape"))
        assert got == want, f"clean({raw[:20]!r}...)"
        assert len(got.encode()) <= MAX_REASON

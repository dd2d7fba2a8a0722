"""An ordinary line of output is searched by no secret pattern: what each pattern cannot match
without is looked for first (runner/redact/shapes.py), so the console's echo keeps up with a
program printing 1 MB/s (benchmarks/echo_cost.py)."""

from __future__ import annotations

import pytest

from dtrun.redact import REDACTED, redact_value, shapes

ORDINARY = (
    "step 12: loss 0.5123 lr 3.0e-04 tokens/s 12,345.6 grad_norm 1.02",
    "[rank0]: Epoch 3/10 | 1200/5000 [00:12<00:40, 95.1it/s, key_count=3]",
    "saving checkpoint to /tmp/run-7/ckpt-1200.pt (a monkey-patched loader)",
)


class _Unsearchable:
    def sub(self, *args: object) -> str:
        raise AssertionError("an ordinary line was searched")


@pytest.mark.parametrize("line", ORDINARY)
def test_an_ordinary_line_is_searched_by_no_secret_pattern(line, monkeypatch):
    for name in ("_URL_CREDENTIALS", "_HEADER", "_BEARER", "_TOKEN_SHAPES"):
        monkeypatch.setattr(shapes, name, _Unsearchable())
    assert redact_value(line) == line


@pytest.mark.parametrize(
    "line",
    [
        "X-Api-Key: s3cr3tvalue99",
        "caf\u00e9 X-API-KEY: s3cr3tvalue99",  # past ASCII: every pattern searches it
        "Proxy-Authorization: Basic s3cr3tvalue99",
        "PRIVATE-TOKEN: s3cr3tvalue99",
    ],
)
def test_a_header_s_credential_is_still_hidden_in_any_case(line):
    assert "s3cr3tvalue99" not in redact_value(line)
    assert REDACTED in redact_value(line)

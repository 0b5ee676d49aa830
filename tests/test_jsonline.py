"""console/link/jsonline.py: every line reads as ``json.loads`` reads it, orjson or not."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.link import jsonline

scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text()
values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=5), kids,
                                                                                        max_size=4), max_leaves=20)


def same(a, b) -> bool:
    """Equal as JSON values, types included (1 is not 1.0 nor True), NaN equal to NaN, -0.0 apart from 0.0."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b


@settings(max_examples=300, deadline=None)
@given(values, st.booleans())
def test_any_line_the_agent_writes_reads_as_the_stdlib_reads_it(value, as_bytes):
    line = json.dumps(value) + "\n"
    got = jsonline.loads(line.encode() if as_bytes else line)
    assert same(got, json.loads(line))


@pytest.mark.parametrize("line", [
    b'{"a": NaN, "b": Infinity, "c": -Infinity}', b'[123456789012345678901234567890]', b'["\\ud800"]',
    b'{"k": 1, "k": 2}', b'[1E400, -0.0, 1.0, 1]', b'  {"x": [true, false, null]}  \n', '["é", "\\u00e9"]'.encode(),
])
def test_the_lines_orjson_reads_otherwise_or_refuses_read_as_the_stdlib_reads_them(line):
    assert same(jsonline.loads(line), json.loads(line))


@pytest.mark.parametrize("line", [b"", b"not json", b'{"a": 1', b"MOTD: welcome\n", b'{"a": 1} trailing'])
def test_a_line_that_is_no_json_raises_value_error(line):
    with pytest.raises(ValueError):
        jsonline.loads(line)


def test_without_orjson_the_stdlib_reads_every_line(monkeypatch):
    monkeypatch.setattr(jsonline, "orjson", None)
    assert same(jsonline.loads(b'{"a": [1, 2.5, NaN]}'), json.loads(b'{"a": [1, 2.5, NaN]}'))

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from ferrymq.common import jsonx

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_standard_json_round_trips(value: object) -> None:
    assert jsonx.loads(jsonx.dumps(value)) == value
    assert jsonx.loads(json.dumps(value)) == value


def test_reads_fastjson_bare_integer_keys() -> None:
    text = '{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},"brokerName":"b"}]}'
    data = jsonx.loads(text)
    assert data["brokerDatas"][0]["brokerAddrs"] == {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}


def test_reads_and_writes_object_keys() -> None:
    key = jsonx.FrozenKey((("brokerName", "b"), ("queueId", 3), ("topic", "t")))
    text = jsonx.dumps({"offsetTable": {key: {"brokerOffset": 5}}})
    assert text == '{"offsetTable":{{"brokerName":"b","queueId":3,"topic":"t"}:{"brokerOffset":5}}}'
    table = jsonx.loads(text)["offsetTable"]
    (parsed_key,) = table
    assert parsed_key.as_dict() == {"brokerName": "b", "queueId": 3, "topic": "t"}


@given(st.text(max_size=40))
def test_garbage_raises_value_error_only(text: str) -> None:
    try:
        jsonx.loads(text)
    except ValueError:
        pass

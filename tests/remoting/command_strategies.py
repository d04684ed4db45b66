"""Hypothesis strategies for remoting commands, shared by the codec tests."""

from __future__ import annotations

from hypothesis import strategies as st

from ferrymq.common.codes import LanguageCode, SerializeType
from ferrymq.remoting import RemotingCommand

text = st.text(max_size=40)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-32768, 32767),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(0, 3),
    remark=st.none() | text,
    ext_fields=st.dictionaries(st.text(min_size=1, max_size=20), text, max_size=8),
    body=st.none() | st.binary(min_size=1, max_size=300),
    language=st.sampled_from([int(c) for c in LanguageCode]),
    version=st.integers(0, 32767),
    serialize_type=st.sampled_from(list(SerializeType)),
)

"""The blocking clients are generated from their async cores: each generated method has the
core's parameters (without self), return type and docstring, and runs on the client's loop."""

from __future__ import annotations

import inspect

import pytest

from ferrymq import AdminClient, LitePullConsumer, Message, Producer, PushConsumer
from ferrymq.client.admin_async import AsyncAdminClient
from ferrymq.client.blocking import _Generated
from ferrymq.client.consumer.lite import AsyncLitePullConsumer
from ferrymq.client.consumer.push import AsyncPushConsumer
from ferrymq.client.errors import ClientStateError
from ferrymq.client.producer_async import AsyncProducer

FACADES = [
    (Producer, AsyncProducer),
    (PushConsumer, AsyncPushConsumer),
    (LitePullConsumer, AsyncLitePullConsumer),
    (AdminClient, AsyncAdminClient),
]


def generated(facade: type) -> dict[str, _Generated[object, ..., object]]:
    return {k: v for k, v in vars(facade).items() if isinstance(v, _Generated)}


@pytest.mark.parametrize(("facade", "core"), FACADES)
def test_generated_methods_keep_the_core_signature_and_docstring(
    facade: type, core: type
) -> None:
    methods = generated(facade)
    assert methods, facade
    for name, desc in methods.items():
        core_sig = inspect.signature(desc.method)
        sig = desc.signature
        assert list(sig.parameters.values()) == list(core_sig.parameters.values())[1:], name
        assert sig.return_annotation == core_sig.return_annotation, name
        assert desc.__doc__ == desc.method.__doc__, name
        assert getattr(core, desc.method.__name__) is desc.method


def test_a_bound_method_carries_name_signature_and_doc_and_is_made_once() -> None:
    producer = Producer("facade-group")
    send = producer.send
    assert send is producer.send  # cached on the instance: one closure call per send
    assert send.__name__ == "send"
    assert send.__doc__ == AsyncProducer.send.__doc__
    assert str(inspect.signature(send)) == "(msg: 'Message') -> 'SendResult'"
    other = Producer("facade-group")
    assert other.send is not send


def test_calls_before_start_raise_the_cores_state_error() -> None:
    producer = Producer("facade-group")
    with pytest.raises(ClientStateError, match="cannot send"):
        producer.send(Message("t", b"x"))
    with pytest.raises(ClientStateError, match="cannot send"):
        producer.send_batch([Message("t", b"x")])
    lite = LitePullConsumer("facade-group")
    with pytest.raises(ClientStateError):
        lite.commit()
    push = PushConsumer("facade-group")
    with pytest.raises(ClientStateError, match="persist offsets"):
        push.persist_offsets()
    # Plain methods run directly until the client is started.
    push.subscribe("facade-topic", "TagA")
    push.unsubscribe("facade-topic")
    assert lite.assignment() == set()

"""One error root: every ferrymq error is a FerryMQError, a broker's answer becomes the class
of its response code, and whether to try again is read from the error."""

from __future__ import annotations

import pytest

import ferrymq
from ferrymq.client.errors import (
    RESPONSE_ERRORS,
    BrokerBusyError,
    BrokerError,
    BrokerSystemError,
    ClientError,
    ClientStateError,
    GroupNotExistError,
    MessageIllegalError,
    MessageNotFoundError,
    MessageValidationError,
    NoPermissionError,
    NoRouteError,
    RequestNotSupportedError,
    SendError,
    ServiceNotAvailableError,
    SubscriptionError,
    TopicNotExistError,
    broker_error,
)
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.common.errors import FerryMQError, request_name, response_name
from ferrymq.remoting import (
    FrameError,
    FrameTooLargeError,
    RemotingClosedError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeoutError,
)
from ferrymq.spark.errors import FerryMQSparkError

# RocketMQ's producer retries exactly these answers (DefaultMQProducerImpl.retryResponseCodes
# restricted to the codes a ferrymq broker sends).
RETRIED = {
    ResponseCode.SYSTEM_ERROR,
    ResponseCode.SYSTEM_BUSY,
    ResponseCode.SERVICE_NOT_AVAILABLE,
    ResponseCode.TOPIC_NOT_EXIST,
    ResponseCode.NO_PERMISSION,
}


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (ResponseCode.SYSTEM_ERROR, BrokerSystemError),
        (ResponseCode.SYSTEM_BUSY, BrokerBusyError),
        (ResponseCode.SERVICE_NOT_AVAILABLE, ServiceNotAvailableError),
        (ResponseCode.TOPIC_NOT_EXIST, TopicNotExistError),
        (ResponseCode.NO_PERMISSION, NoPermissionError),
        (ResponseCode.MESSAGE_ILLEGAL, MessageIllegalError),
        (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, RequestNotSupportedError),
        (ResponseCode.SUBSCRIPTION_PARSE_FAILED, SubscriptionError),
        (ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, GroupNotExistError),
        (ResponseCode.VERSION_NOT_SUPPORTED, BrokerError),
        (4242, BrokerError),
    ],
)
def test_a_response_code_maps_to_its_class_with_the_answer_fields(
    code: int, cls: type[BrokerError]
) -> None:
    err = broker_error("10.0.0.1:10911", RequestCode.SEND_MESSAGE_V2, code, "why")
    assert type(err) is cls
    assert (err.addr, err.request_code, err.code, err.remark) == (
        "10.0.0.1:10911",
        RequestCode.SEND_MESSAGE_V2,
        code,
        "why",
    )
    assert isinstance(err, BrokerError) and isinstance(err, ClientError)
    assert isinstance(err, FerryMQError)


@pytest.mark.parametrize("code", list(ResponseCode))
def test_retriable_per_code_follows_rocketmq_producer(code: ResponseCode) -> None:
    if code is ResponseCode.SUCCESS:
        return
    err = broker_error("b:1", RequestCode.SEND_MESSAGE_V2, code, None)
    assert err.retriable is (code in RETRIED), code.name


def test_every_mapped_class_is_a_broker_error_and_only_retried_codes_are_retriable() -> None:
    for code, cls in RESPONSE_ERRORS.items():
        assert issubclass(cls, BrokerError)
        assert cls.retriable is (code in RETRIED)


def test_message_names_the_operation_and_code_not_numbers() -> None:
    err = broker_error("b:1", 310, 13, "body too large")
    assert str(err) == "SEND_MESSAGE_V2 on b:1 failed: MESSAGE_ILLEGAL: body too large"
    assert str(broker_error("b:1", 77777, 9999, "")) == "request 77777 on b:1 failed: code 9999"
    assert request_name(RequestCode.PULL_MESSAGE) == "PULL_MESSAGE"
    assert response_name(ResponseCode.SYSTEM_BUSY) == "SYSTEM_BUSY"


def test_one_root_for_remoting_client_and_spark_errors() -> None:
    samples: list[FerryMQError] = [
        RemotingConnectError("a:1", "refused"),
        RemotingTimeoutError("a:1", 10, 3.0),
        RemotingClosedError("a:1"),
        FrameError("bad", recoverable=False),
        FrameTooLargeError(10, 5),
        ClientStateError("producer", "shut down", "send"),
        MessageValidationError("body", "empty"),
        NoRouteError("t", "ns:1"),
        SendError("t", 3, None),
        MessageNotFoundError("id X"),
        FerryMQSparkError("x"),
    ]
    for exc in samples:
        assert isinstance(exc, FerryMQError)
    # A lost connection or a missing route may heal on another attempt; bad input cannot.
    assert [type(e).__name__ for e in samples if e.retriable] == [
        "RemotingConnectError",
        "RemotingTimeoutError",
        "RemotingClosedError",
        "NoRouteError",
    ]
    assert issubclass(RemotingError, FerryMQError)


def test_names_user_code_imports_stay_importable_from_the_package() -> None:
    assert ferrymq.FerryMQError is FerryMQError
    assert ferrymq.ClientError is ClientError
    assert ferrymq.BrokerError is BrokerError
    assert ferrymq.SendError is SendError
    assert ferrymq.NoRouteError is NoRouteError
    assert ferrymq.MessageValidationError is MessageValidationError
    assert ferrymq.MessageIllegalError is MessageIllegalError
    assert ferrymq.RemotingError is RemotingError
    assert issubclass(MessageValidationError, ValueError)

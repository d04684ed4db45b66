"""`ferrymq proxy --help` says what the proxy is, not only its flags."""

from __future__ import annotations

import pytest

from ferrymq.cli.main import main


def test_proxy_help_describes_the_proxy_and_its_ready_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["proxy", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    description = text.split("\n\n")[1]  # after the usage, before the options
    assert description.startswith("RocketMQ 5's proxy in cluster mode"), text
    for said in ("apache.rocketmq.v2", "every broker group registered with the name server",
                 "no state of its own", "several proxies\nbehind one address"):
        assert said in description, (said, description)
    assert "\nReady line: proxy grpc=HOST:PORT (then metrics=HOST:PORT with --metrics-port)\n" in text
    assert "--grpc-port" in text.split("options:", 1)[1]

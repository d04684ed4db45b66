"""Writing a runtime configuration change back into the broker's TOML file: keys changed in
place whatever their spelling, new keys added where the broker's keys are, comments kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferrymq.broker.config import load_config
from ferrymq.broker.config_file import write_back


def test_top_level_keys_are_changed_in_place_and_new_ones_go_before_the_first_table(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text('# the broker\ntransactionTimeOut = 6000  # default\nbroker_name = "b"\n\n[tls.server]\n'
                    'mode = "disabled"\n', encoding="utf-8")
    write_back(path, {"max_reconsume_times": 3, "reject_transaction_message": True, "transaction_timeout_ms": 900})
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# the broker\ntransactionTimeOut = 900\nbroker_name = \"b\"\n")
    assert text.index("reject_transaction_message = true") < text.index("[tls.server]")
    cfg = load_config(path)
    assert (cfg.max_reconsume_times, cfg.reject_transaction_message, cfg.transaction_timeout_ms) == (3, True, 900)


def test_a_broker_table_gets_the_keys(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text('title = "x"\n[broker]\nbroker_name = "b"\nslave_read_enable = false', encoding="utf-8")
    write_back(path, {"slave_read_enable": True, "auto_create_subscription_group": False})
    cfg = load_config(path)
    assert cfg.slave_read_enable is True and cfg.auto_create_subscription_group is False
    assert path.read_text(encoding="utf-8").count("slave_read_enable") == 1


def test_a_file_that_would_not_load_is_not_written(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text("max_reconsume_times = 2\n", encoding="utf-8")
    with pytest.raises(ValueError):
        write_back(path, {"max_reconsume_times": float("nan"), "bad key": 1})
    assert path.read_text(encoding="utf-8") == "max_reconsume_times = 2\n"

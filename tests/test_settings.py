"""Settings: environment parsing with errors that name the variable, run-time changes."""

from __future__ import annotations

import subprocess
import sys

import pytest

import adaptcoll
from adaptcoll import settings


def test_sizes_and_suffixes():
    env = {
        "ADAPTCOLL_BCAST_SEGMENT_SIZE": "64K",
        "ADAPTCOLL_REDUCE_SEGMENT_SIZE": "2M",
        "ADAPTCOLL_ALLREDUCE_SEGMENT_SIZE": "1000",
        "ADAPTCOLL_NATIVE_BELOW": "0",
    }
    s = settings.from_environ(env)
    assert (s.bcast_segment_size, s.reduce_segment_size, s.allreduce_segment_size) == (65536, 2 << 20, 1000)
    assert s.native_below == 0
    assert settings.parse_size("3MiB", "x") == 3 << 20


@pytest.mark.parametrize(
    "var, value",
    [
        ("ADAPTCOLL_BCAST_ALGORITHM", "fibonacci"),
        ("ADAPTCOLL_REDUCE_ALGORITHM", "knomial:radix"),
        ("ADAPTCOLL_BCAST_SEGMENT_SIZE", "0"),
        ("ADAPTCOLL_ALLREDUCE_SEGMENT_SIZE", "12Q"),
        ("ADAPTCOLL_NATIVE_BELOW", "-1"),
        ("ADAPTCOLL_BCAST_SEND_WINDOW", "0"),
        ("ADAPTCOLL_REDUCE_RECV_WINDOW", "many"),
        ("ADAPTCOLL_SYNC_SENDS", "sometimes"),
        ("ADAPTCOLL_REPRODUCIBLE", "maybe"),
        ("ADAPTCOLL_SHM_BYTES", "lots"),
        ("ADAPTCOLL_SHM_SEGMENT_SIZE", "32"),
        ("ADAPTCOLL_SHM_SLOTS", "0"),
        ("ADAPTCOLL_ALLREDUCE_ALGORITHM", "shm:inner=chain"),
    ],
)
def test_invalid_environment_values_name_the_variable(var, value):
    with pytest.raises(ValueError, match=var):
        settings.from_environ({var: value})


def test_invalid_environment_at_import_is_a_clear_error():
    proc = subprocess.run(
        [sys.executable, "-c", "import adaptcoll"],
        capture_output=True,
        text=True,
        env={"ADAPTCOLL_BCAST_ALGORITHM": "nope", "PATH": ""},
        timeout=60,
    )
    assert proc.returncode != 0
    assert "ADAPTCOLL_BCAST_ALGORITHM" in proc.stderr and "binomial" in proc.stderr


def test_algorithm_choices_listed_in_error():
    with pytest.raises(ValueError) as info:
        settings.from_environ({"ADAPTCOLL_ALLREDUCE_ALGORITHM": "star"})
    for kind in ("binomial", "in_order_binomial", "binary", "pipeline", "chain", "linear", "knomial", "native"):
        assert kind in str(info.value)


def test_configure_and_configured():
    before = adaptcoll.current_settings()
    with adaptcoll.configured(bcast_algorithm="chain:chains=2", bcast_segment_size="8K") as now:
        assert now.bcast_algorithm == "chain:chains=2" and now.bcast_segment_size == 8192
        assert adaptcoll.current_settings() is now
    assert adaptcoll.current_settings() == before
    with pytest.raises(TypeError, match="unknown adaptcoll setting"):
        adaptcoll.configure(bcast_segmentsize=4)
    with pytest.raises(ValueError, match="reduce_send_window"):
        adaptcoll.configure(reduce_send_window=-2)
    assert adaptcoll.current_settings() == before


def test_thresholds_follow_native_below_and_the_live_dict():
    assert settings.current().thresholds == settings.THRESHOLDS
    with adaptcoll.configured(native_below="64K"):
        assert settings.THRESHOLDS == {"bcast": 65536, "reduce": 65536, "allreduce": 65536}
        with adaptcoll.configured(reduce_native_below="1M"):
            assert settings.THRESHOLDS["reduce"] == 1 << 20 and settings.THRESHOLDS["bcast"] == 65536
    assert settings.current().thresholds == settings.THRESHOLDS


def test_windows_and_segment_size_per_collective():
    with adaptcoll.configured(
        bcast_send_window=5,
        bcast_recv_window=7,
        reduce_send_window=1,
        reduce_recv_window=2,
        allreduce_segment_size="8K",
    ):
        cfg = settings.current()
        assert cfg.windows("bcast") == (5, 7)
        assert cfg.windows("reduce") == cfg.windows("allreduce") == (1, 2)
        assert cfg.segment_size("allreduce") == 8192 and cfg.segment_size("bcast") == 512 * 1024


def test_shm_settings():
    s = settings.from_environ(
        {
            "ADAPTCOLL_SHM_BYTES": "16M",
            "ADAPTCOLL_SHM_SEGMENT_SIZE": "1M",
            "ADAPTCOLL_SHM_SLOTS": "8",
            "ADAPTCOLL_BCAST_ALGORITHM": "shm",
            "ADAPTCOLL_REDUCE_ALGORITHM": "topo:inner=chain,intra=shm",
        }
    )
    assert (s.shm_bytes, s.shm_segment_size, s.shm_slots) == (16 << 20, 1 << 20, 8)
    assert (s.bcast_algorithm, s.reduce_algorithm) == ("shm", "topo:inner=chain,intra=shm")
    defaults = settings.Settings()
    assert (defaults.shm_bytes, defaults.shm_segment_size, defaults.shm_slots) == (64 << 20, 512 << 10, 4)

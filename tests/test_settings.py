"""Settings: environment parsing with errors that name the variable, run-time changes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import adaptcoll
from adaptcoll.runtime import settings


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
        ("ADAPTCOLL_PROGRESS_THREAD", "sometimes"),
        ("ADAPTCOLL_PROGRESS_THREAD", "-5"),
        ("ADAPTCOLL_PROGRESS_THREAD", "nan"),
    ],
)
def test_invalid_environment_values_name_the_variable(var, value):
    with pytest.raises(ValueError, match=var):
        settings.from_environ({var: value})


def test_progress_thread_is_on_off_or_a_pause_in_microseconds():
    assert settings.Settings().progress_thread == 0  # off unless asked for
    for text, pause in (("on", settings.PROGRESS_PAUSE_US), ("yes", 50.0), ("off", 0.0), ("0", 0.0), ("20", 20.0)):
        assert settings.from_environ({"ADAPTCOLL_PROGRESS_THREAD": text}).progress_thread == pause
    with settings.configured(progress_thread=12.5):
        assert settings.current().progress_thread == 12.5


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


def test_empty_environment_values_mean_unset():
    """`VAR=` (shells and job scripts) is the default, for every setting, at import too."""
    blank = {var: value for var, value in zip(settings.ENV_VARS.values(), ["", " "] * len(settings.ENV_VARS))}
    s = settings.from_environ(blank)
    assert s == settings.Settings() and s.explicit == ()
    env = {var: "" for var in [*settings.ENV_VARS.values(), *settings.OTHER_SIZE_VARS, "ADAPTCOLL_NOISE"]}
    code = (
        "import adaptcoll, adaptcoll.forms.pickled as p, adaptcoll.runtime.settings as s, adaptcoll.noise.spec as n; "
        "assert s.current() == s.Settings(), s.current(); assert p.INLINE_BELOW == 64 * 1024; "
        "assert n.from_env() is None; print('ok')"
    )
    # (HOME and the OMPI_/PRTE_ variables stay: Open MPI's singleton start needs a home directory, and
    # consent to run as root where the suite runs so)
    kept = {k: v for k, v in os.environ.items() if k == "HOME" or k.startswith(("OMPI_", "PRTE_"))}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**kept, **env, "PATH": ""}, timeout=60
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


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


def test_device_threshold_defaults_to_4m_and_follows_native_below():
    cfg = settings.current()
    assert cfg.device_native_below == 4 << 20
    assert {c: cfg.device_threshold(c) for c in settings.COLLECTIVES} == dict.fromkeys(settings.COLLECTIVES, 4 << 20)
    with adaptcoll.configured(native_below=0):  # "serve every size" applies to device memory too
        assert settings.current().device_threshold("allreduce") == 0
    with adaptcoll.configured(device_native_below=-1):  # -1: the collective's own host threshold
        assert settings.current().device_threshold("reduce") == settings.current().threshold("reduce")
    with adaptcoll.configured(device_native_below="4K", native_below="64K"):
        assert settings.current().device_threshold("bcast") == 4096
    assert settings.from_environ({"ADAPTCOLL_DEVICE_NATIVE_BELOW": "256K"}).device_threshold("bcast") == 256 << 10
    with pytest.raises(ValueError, match="ADAPTCOLL_DEVICE_NATIVE_BELOW"):
        settings.from_environ({"ADAPTCOLL_DEVICE_NATIVE_BELOW": "lots"})


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


@pytest.mark.parametrize(
    "var, value, expect",
    [
        ("ADAPTCOLL_BCAST_ALGORITHM", "knomial:radx=4", "valid parameters: radix"),
        ("ADAPTCOLL_REDUCE_ALGORITHM", "knomial:radix=1", "radix must be an int >= 2"),
        ("ADAPTCOLL_ALLREDUCE_ALGORITHM", "chain:chains=two", "chains must be an int"),
        ("ADAPTCOLL_BCAST_ALGORITHM", "topo:inner=knomial:radix=1", "topo parameter inner"),
        ("ADAPTCOLL_BCAST_ALGORITHM", "topo:levels=2", "valid parameters here: inner, intra"),
        ("ADAPTCOLL_BCAST_ALGORITHM", "binomial:fanout=2", "valid parameters: none"),
        ("ADAPTCOLL_TOPOLOGY", "nodes=x", "non-integer"),
        ("ADAPTCOLL_TOPOLOGY", "node=0,0,1;socket=0,1", "different numbers of ids"),
    ],
)
def test_tree_parameters_and_topology_are_validated_when_set(var, value, expect):
    """Checked at import / configure() time, not at the first served call, with the variable's name."""
    with pytest.raises(ValueError, match=var) as info:
        settings.from_environ({var: value})
    assert expect in str(info.value)
    key = var[len("ADAPTCOLL_") :].lower()
    with pytest.raises(ValueError, match=key) as info:
        adaptcoll.configure(**{key: value})
    assert expect in str(info.value)
    good = settings.from_environ({"ADAPTCOLL_BCAST_ALGORITHM": "topo:inner=knomial:radix=4,intra=chain"})
    assert good.bcast_algorithm.startswith("topo")


def test_bad_tree_parameter_fails_at_import_naming_variable_and_valid_parameters():
    for env, expect in (
        ({"ADAPTCOLL_BCAST_ALGORITHM": "knomial:radx=4"}, ("ADAPTCOLL_BCAST_ALGORITHM", "valid parameters: radix")),
        ({"ADAPTCOLL_PICKLE_INLINE_BELOW": "lots"}, ("ADAPTCOLL_PICKLE_INLINE_BELOW", "byte count")),
    ):
        proc = subprocess.run(
            [sys.executable, "-c", "import adaptcoll"],
            capture_output=True,
            text=True,
            env={**env, "PATH": ""},
            timeout=60,
        )
        assert proc.returncode != 0 and all(e in proc.stderr for e in expect), proc.stderr


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

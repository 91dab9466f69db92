"""Tuning tables without MPI: round trip, schema errors naming file and field, the nearest-entry and
nearest-communicator rules, explicit settings winning over the table, bad tables ignored with one
warning, where tables are found, and the CLI's argument forms."""

from __future__ import annotations

import json
import warnings

import pytest

import adaptcoll
from adaptcoll.runtime import counters, settings
from adaptcoll.tune import cli, files, table
from adaptcoll.tune.config import ServeConfig
from adaptcoll.tune.policy import NEVER, TUNED_NATIVE, CommFacts, TuningWarning, resolve

K, M = 1 << 10, 1 << 20
LIB = "MPICH Version: 5.0.2"
PIPE = ServeConfig("pipeline", 256 * K, 0, 0)
BINO = ServeConfig("binomial", 512 * K, 4, 0)


def _entry(collective="bcast", nbytes=M, serve=True, config=PIPE, size=4, nodes=1, rpn=None, **kw):
    return table.Entry(collective, "host", size, nodes, rpn or size // nodes, nbytes, serve, config, **kw)


def _table(*entries, library=LIB):
    return table.Table(library, tuple(entries), {"host": "h", "cpus": 2}, "2026-11-23T00:00:00", {"ranks": 4})


def _facts(size=4, nodes=1, per_core=1.0, library=LIB):
    return CommFacts(size, nodes, size // nodes, per_core, library)


def _bytes(t: table.Table) -> bytes:
    return table.dumps(t).encode()


def test_round_trip_and_merge(tmp_path):
    t = _table(
        _entry(nbytes=4 * K, serve=False, config=BINO, ratio=0.4, p25=0.3, p75=0.5, ci_low=0.35, ci_high=0.45),
        _entry(nbytes=M, ratio=1.3, p25=1.2, p75=1.4, samples=30, candidates=({"label": "x", "ratio": 1.3},)),
        _entry("allreduce", 16 * M, config=ServeConfig("binomial", 512 * K, 16, 1)),
    )
    back = table.parse(_bytes(t), "t.json")
    assert back.entries == tuple(sorted(t.entries, key=lambda e: e.key))  # written sorted
    assert (back.mpi_library, back.created, back.tool, back.machine["cpus"]) == (LIB, t.created, t.tool, 2)
    assert table.parse(_bytes(back), "t.json") == back
    path = tmp_path / "t.json"
    assert table.write(path, t) == ""
    newer = _table(_entry(nbytes=M, config=BINO, ratio=1.1), _entry("reduce", 4 * M))
    assert "merged" in table.write(path, newer)
    merged = table.parse(path.read_bytes(), str(path))
    by_key = {e.key: e for e in merged.entries}
    assert len(by_key) == 4 and by_key[_entry(nbytes=M).key].config == BINO  # replaced, others kept
    with pytest.raises(table.TableError, match="different MPI libraries"):
        table.merge(t, _table(library="Open MPI v5"))


def _doc() -> dict:
    return _table(_entry()).to_json()


@pytest.mark.parametrize(
    "change, field, problem",
    [
        (lambda d: d.pop("version"), "version", "missing"),
        (lambda d: d.update(version=2), "version", "reads version 1"),
        (lambda d: d.update(format="other"), "format", "adaptcoll-tuning"),
        (lambda d: d["machine"].pop("mpi_library"), "machine.mpi_library", "missing"),
        (lambda d: d.update(entries={}), "entries", "expected a list"),
        (lambda d: d["entries"][0].update(collective="gather"), "entries[0].collective", "bcast, reduce, allreduce"),
        (lambda d: d["entries"][0].update(bytes="1M"), "entries[0].bytes", "integer >= 1"),
        (lambda d: d["entries"][0].update(choice="maybe"), "entries[0].choice", "native, adaptcoll"),
        (lambda d: d["entries"][0]["config"].update(segment_size=0), "entries[0].config.segment_size", ">= 1"),
        (lambda d: d["entries"][0]["config"].update(algorithm="star"), "entries[0].config.algorithm", "unknown"),
        (lambda d: d["entries"][0]["config"].pop("max_segments"), "entries[0].config.max_segments", "missing"),
        (lambda d: d["entries"][0].update(ratio=float("nan")), "entries[0].ratio", "finite"),
        (lambda d: d["entries"].append(dict(d["entries"][0])), "entries[1]", "same collective"),
        (lambda d: d["entries"][0].update(memory="disk"), "entries[0].memory", "host, device"),
    ],
)
def test_schema_errors_name_the_file_and_the_field(change, field, problem):
    doc = _doc()
    change(doc)
    with pytest.raises(table.TableError) as info:
        table.parse(json.dumps(doc), "/some/dir/tuning.json")
    text = str(info.value)
    assert text.startswith("/some/dir/tuning.json: ") and f" {field}: " in text and problem in text, text


def test_not_json_is_a_clear_error():
    with pytest.raises(table.TableError, match=r"^bad\.json: not valid JSON"):
        table.parse(b"{not json", "bad.json")


def test_nearest_entry_in_message_size():
    entries = [_entry(nbytes=n, serve=s) for n, s in ((4 * K, False), (64 * K, True), (M, False))]
    bands = table.bands(entries)
    starts = [b.start for b in bands]
    assert starts == [0, 16 * K, 256 * K]  # geometric midpoints: sqrt(4K*64K), sqrt(64K*1M)

    def pick(n: int) -> int:
        return entries[table.band_index(starts, n)].bytes

    assert [pick(n) for n in (1, 4 * K, 16 * K - 1, 16 * K, 200 * K, 256 * K - 1, 256 * K, 1 << 30)] == [
        4 * K, 4 * K, 4 * K, 64 * K, 64 * K, 64 * K, M, M,
    ]  # fmt: skip
    # between 4K and 8K (powers of two) the boundary is 5793 = ceil(sqrt(4096 * 8192))
    assert table.bands([_entry(nbytes=4 * K), _entry(nbytes=8 * K)])[1].start == 5793


def test_nearest_communicator_size():
    entries = [_entry(nbytes=M, size=s) for s in (2, 8)] + [_entry(nbytes=M, size=16, nodes=2)]
    assert table.nearest_group(entries, "bcast", "host", 3, 1)[0] == (2, 1, 2)
    assert table.nearest_group(entries, "bcast", "host", 4, 1)[0] == (8, 1, 8)  # tie: the larger
    assert table.nearest_group(entries, "bcast", "host", 8, 1)[0] == (8, 1, 8)
    assert table.nearest_group(entries, "bcast", "host", 16, 2)[0] == (16, 2, 8)
    assert table.nearest_group(entries, "reduce", "host", 8, 1) == (None, [])


def test_choose_follows_table_and_explicit_settings_win():
    t = _table(
        _entry(nbytes=64 * K, serve=False, config=BINO),
        _entry(nbytes=M, serve=True, config=PIPE),
        _entry(nbytes=16 * M, serve=False, config=BINO),
    )
    with adaptcoll.configured(tuning="off"):  # the session's own settings: nothing explicit below matters
        tuning = resolve(_bytes(t), "t.json", _facts(), warn=True)
        assert tuning.sources[("bcast", "host")] == "table"
        assert tuning.sources[("reduce", "host")] == "defaults"
        assert tuning.below["bcast"] == 256 * K  # first served band starts at sqrt(64K * 1M)
        small, mid, big = (tuning.choose("bcast", n) for n in (64 * K, M, 16 * M))
        assert not small.serve and small.native is not None and small.native.reason == "below native_below"
        assert mid.serve and (mid.algorithm, mid.segment_size, mid.max_segments) == ("pipeline", 256 * K, 0)
        assert mid.label == "pipeline seg=256K max_segments=0 [table]"
        assert not big.serve and big.native is TUNED_NATIVE
        assert tuning.choose("bcast", M) is mid  # cached per band
        with adaptcoll.configured(bcast_segment_size="64K"):
            c = tuning.choose("bcast", M)
            assert c.serve and c.segment_size == 64 * K and c.algorithm == "pipeline" and c.source == "table+settings"
        with adaptcoll.configured(bcast_native_below="32M"):
            assert tuning.below["bcast"] == 32 * M
            assert not tuning.choose("bcast", 16 * M).serve
        with adaptcoll.configured(native_below=0):
            assert tuning.below == {"bcast": 0, "reduce": 0, "allreduce": 0}
            c = tuning.choose("bcast", 16 * M)  # explicit threshold serves; the entry's best config is used
            assert c.serve and c.algorithm == "binomial" and c.max_segments == 4
        with adaptcoll.configured(
            bcast_native_below=0, bcast_algorithm="chain", bcast_segment_size="1M", max_segments=2
        ):
            assert tuning.choose("bcast", 4 * K).label == "chain seg=1M max_segments=2 [settings]"
        assert tuning.below["bcast"] == 256 * K and tuning.choose("bcast", M) == mid  # restored


def test_configure_none_makes_a_setting_not_explicit_again():
    with adaptcoll.configured(reduce_segment_size="64K", native_below="1K"):
        s = settings.current()
        assert s.is_explicit("reduce_segment_size") and s.threshold_explicit("allreduce")
        adaptcoll.configure(reduce_segment_size=None, native_below=None)
        s = settings.current()
        assert not s.is_explicit("reduce_segment_size") and s.reduce_segment_size == 512 * K
        assert not s.threshold_explicit("allreduce")
    assert settings.from_environ({"ADAPTCOLL_NATIVE_BELOW": "0"}).threshold_explicit("reduce")
    assert not settings.from_environ({}).threshold_explicit("reduce")


def _resolve_warns(data: bytes, facts: CommFacts, warn: bool = True, problem: str | None = None):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tuning = resolve(data, "bad.json", facts, warn=warn, problem=problem)
    return tuning, [w for w in caught if issubclass(w.category, TuningWarning)]


@pytest.mark.parametrize(
    "data, problem, expected",
    [
        (b'{"format": "adaptcoll-tuning", "version": 1}', None, "bad.json: machine: missing"),
        (b"\x00\xff", None, "bad.json: not valid JSON"),
        (None, None, "was measured with 'Open MPI v5.0.11'"),
        (b"", "bad.json: cannot read (No such file)", "cannot read"),
    ],
)
def test_bad_tables_are_ignored_with_one_warning_and_the_defaults_apply(data, problem, expected):
    if data is None:
        data = _bytes(_table(_entry(), library="Open MPI v5.0.11"))
    facts = _facts(size=4, per_core=2.0)
    tuning, caught = _resolve_warns(data, facts, problem=problem)
    assert len(caught) <= 1 and all(s == "defaults" for s in tuning.sources.values())
    assert any(expected in n for n in tuning.notes), tuning.notes
    assert tuning.below == {"bcast": 4 * M, "reduce": M, "allreduce": 4 * M}  # shared cores rule
    _, caught_again = _resolve_warns(data, facts, problem=problem)
    assert not caught_again  # once per process
    _, quiet = _resolve_warns(data + b" ", facts, warn=False, problem=problem)  # ranks other than 0: no warning
    assert not quiet


def test_first_bad_table_warns(recwarn):
    warnings.simplefilter("always")
    resolve(b"[1, 2]", "fresh-bad.json", _facts(), warn=True)
    found = [w for w in recwarn if issubclass(w.category, TuningWarning)]
    assert len(found) == 1 and "fresh-bad.json: (document): expected an object" in str(found[0].message)


def test_nearest_size_is_reported_in_the_label_and_the_notes():
    t = _table(_entry(nbytes=M, size=4))
    counters.reset_stats()
    tuning = resolve(_bytes(t), "t4.json", _facts(size=3), warn=False)
    assert tuning.choose("bcast", M).label.endswith("[table~4]")
    assert any("on 3 ranks" in n and "measured on 4 ranks" in n for n in counters.tuning_notes())


def test_where_tables_are_found(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert files.cache_dir() == tmp_path / "adaptcoll"
    cached = files.cache_file(LIB, host="node17.cluster")
    assert cached == tmp_path / "adaptcoll" / "tuning-node17-mpich-version-5.0.2.json"
    assert files.locate("", LIB) is None  # no cache file yet
    own = files.cache_file(LIB)
    own.parent.mkdir(parents=True)
    own.write_text("{}")
    assert files.locate("", LIB) == own
    assert files.locate("off", LIB) is None
    assert files.locate("~/t.json", LIB) == (tmp_path / "x").home() / "t.json"
    assert files.read_bytes(tmp_path / "missing.json")[1].startswith(f"{tmp_path / 'missing.json'}: cannot read")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert files.cache_dir().parts[-2:] == (".cache", "adaptcoll")
    assert files.library_name("MPICH Version:      5.0.2\nMPICH Release date: x") == LIB


def test_cli_sizes_and_collectives():
    assert cli.parse_sizes("4K..256M") == [4 * K * 4**i for i in range(9)]
    assert cli.parse_sizes("1M..8M:2") == [M, 2 * M, 4 * M, 8 * M]
    assert cli.parse_sizes("1M,4K, 64K") == [4 * K, 64 * K, M]
    assert cli.parse_collectives("allreduce,bcast") == ["bcast", "allreduce"]
    for bad in ("8M..1M", "0..4K", "4K..1M:3", "x"):
        with pytest.raises(ValueError, match="--sizes"):
            cli.parse_sizes(bad)
    with pytest.raises(ValueError, match="--collectives"):
        cli.parse_collectives("gather")


def test_show_prints_a_table_and_reports_bad_ones(tmp_path, capsys):
    path = tmp_path / "t.json"
    table.write(path, _table(_entry(nbytes=M, ratio=1.31, p25=1.2, p75=1.4), _entry(nbytes=4 * K, serve=False)))
    assert cli.main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "bcast (host memory), 4 ranks, 1 node(s), 4 ranks per node" in out
    assert "1M  adaptcoll   1.31  1.20-1.40" in out and "4K  native" in out
    path.write_text('{"format": "adaptcoll-tuning", "version": 1, "machine": {}}')
    assert cli.main(["show", str(path)]) == 2
    assert "machine.mpi_library: missing" in capsys.readouterr().err


def test_show_plot(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot needs matplotlib (bench extra)")
    path, png = tmp_path / "t.json", tmp_path / "t.png"
    table.write(path, _table(_entry(nbytes=M), _entry(nbytes=4 * K, serve=False), _entry("reduce", 16 * M)))
    assert cli.main(["show", str(path), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_never_threshold_when_nothing_is_served():
    tuning = resolve(b"", "", _facts(size=2, per_core=1.0), warn=False)
    assert tuning.below["bcast"] == NEVER and not tuning.choose("bcast", 1 << 30).serve


# -- Allgather / Reduce-scatter entries -----------------------------------------------------------
RING_1M = ServeConfig("ring", M, 0, 0)
RING_64K = ServeConfig("ring", 64 * K, 2, 0)


def _block_calls(tuning, sizes=(4 * K, M, 4 * M, 16 * M, 64 * M)):
    from adaptcoll.tune.blocks import block_below, choose_block

    out = {}
    for coll in settings.BLOCK_COLLECTIVES:
        out[coll] = [block_below(tuning, coll)] + [choose_block(tuning, coll, n) for n in sizes]
    return out


def test_a_table_without_block_entries_leaves_allgather_and_reduce_scatter_to_the_shipped_rule():
    old = _table(_entry(nbytes=M, size=2), _entry("allreduce", 16 * M, size=2, config=BINO))  # an older table
    with adaptcoll.configured(tuning="off"):
        for explicit in ({}, {"native_below": 0}, {"reduce_scatter_algorithm": "ring:segment_size=1M"}):
            with adaptcoll.configured(**explicit):
                for size in (2, 4):
                    tuned = resolve(_bytes(old), "old.json", _facts(size=size), warn=False)
                    rule = resolve(b"", "", _facts(size=size), warn=False)
                    assert tuned.sources[("allgather", "host")] == "defaults"
                    assert _block_calls(tuned) == _block_calls(rule), (explicit, size)
        calls = _block_calls(resolve(_bytes(old), "old.json", _facts(size=2), warn=False))
        assert calls["reduce_scatter"][0] == 4 * M and calls["allgather"][0] == NEVER  # the 2-rank rule
        assert calls["reduce_scatter"][4].label == "ring seg=32M max_segments=0 [defaults]"
        assert not calls["reduce_scatter"][2].serve and calls["reduce_scatter"][2].native.reason == "below native_below"
        assert ("allgather", "device") not in resolve(_bytes(old), "old.json", _facts(size=2), warn=False).bands


def test_block_entries_round_trip_and_are_validated():
    t = _table(
        _entry("allgather", M, size=2, config=RING_1M, ratio=1.2),
        _entry("reduce_scatter", 16 * M, size=2, config=RING_64K, serve=False),
    )
    back = table.parse(_bytes(t), "b.json")
    assert back.entries == tuple(sorted(t.entries, key=lambda e: e.key))
    doc = t.to_json()
    for change, field, problem in (
        (lambda e: e["config"].update(algorithm="binomial"), "config.algorithm", "'ring' only"),
        (lambda e: e["config"].update(algorithm="ring:segment_size=1M"), "config.algorithm", "'ring' only"),
        (lambda e: e["config"].update(algorithm="rabenseifner"), "config.algorithm", "'ring' only"),
        (lambda e: e.update(memory="device"), "memory", "expected one of host, got 'device'"),
    ):
        bad = json.loads(json.dumps(doc))
        change(bad["entries"][0])
        with pytest.raises(table.TableError, match=f"entries\\[0\\]\\.{field}: .*{problem}"):
            table.parse(json.dumps(bad), "b.json")
    bad = json.loads(json.dumps(doc))
    bad["entries"][0].update(collective="bcast")  # ring stays an allreduce algorithm for the trees
    with pytest.raises(table.TableError, match=r"entries\[0\]\.config\.algorithm: 'ring' is an allreduce algorithm"):
        table.parse(json.dumps(bad), "b.json")


def test_block_entries_decide_allgather_and_reduce_scatter_and_explicit_settings_win():
    from adaptcoll.tune.blocks import block_below, choose_block

    t = _table(
        _entry("reduce_scatter", 64 * K, size=2, serve=False, config=RING_64K),
        _entry("reduce_scatter", M, size=2, serve=True, config=RING_64K),
        _entry("reduce_scatter", 16 * M, size=2, serve=False, config=RING_1M),
        _entry("allgather", 64 * K, size=4, serve=True, config=RING_1M),
    )
    with adaptcoll.configured(tuning="off"):
        tuning = resolve(_bytes(t), "b.json", _facts(size=2), warn=False)
        assert tuning.sources[("reduce_scatter", "host")] == "table"
        assert tuning.sources[("allgather", "host")] == "table~4"  # the nearest measured size
        assert block_below(tuning, "reduce_scatter") == 256 * K and block_below(tuning, "allgather") == 0
        small, mid, big = (choose_block(tuning, "reduce_scatter", n) for n in (64 * K, M, 16 * M))
        assert not small.serve and small.native.reason == "below native_below"
        assert mid.serve and (mid.segment_size, mid.max_segments) == (64 * K, 2)
        assert mid.label == "ring seg=64K max_segments=2 [table]"
        assert not big.serve and big.native is TUNED_NATIVE
        assert choose_block(tuning, "allgather", 64 * M).label == "ring seg=1M max_segments=0 [table~4]"
        with adaptcoll.configured(reduce_scatter_native_below=0):  # serves, with the table's best config
            assert block_below(tuning, "reduce_scatter") == 0
            c = choose_block(tuning, "reduce_scatter", 16 * M)
            assert c.serve and c.label == "ring seg=1M max_segments=0 [table]"
        with adaptcoll.configured(reduce_scatter_algorithm="ring:segment_size=8K"):
            c = choose_block(tuning, "reduce_scatter", M)
            assert c.serve and c.label == "ring seg=8K max_segments=2 [table+settings]"
        with adaptcoll.configured(reduce_scatter_algorithm="native"):
            assert choose_block(tuning, "reduce_scatter", M).native.reason == "algorithm=native"
        assert tuning.below == {"bcast": NEVER, "reduce": 4 * M, "allreduce": 4 * M}  # the others: the rule
        other = resolve(_bytes(_table(*t.entries, library="Open MPI v5")), "o.json", _facts(size=2), warn=False)
        assert other.sources[("reduce_scatter", "host")] == "defaults"  # another MPI: the shipped rule


def test_the_tuner_candidates_for_allgather_and_reduce_scatter():
    from adaptcoll.measure import make_buffers
    from adaptcoll.tune.candidates import candidates, signature

    for coll in settings.BLOCK_COLLECTIVES:
        found = candidates(coll, 2)
        assert [(c.algorithm, c.segment_size, c.max_segments) for c in found] == [
            ("ring", 512 * K, 0), ("ring", 4 * M, 0), ("ring", 32 * M, 0),
        ]  # fmt: skip
        distinct = [len({signature(c, coll, p, n, 4) for c in found}) for n, p in ((M, 2), (16 * M, 2), (16 * M, 8))]
        assert distinct == [1, 3, 2]  # a segment never exceeds a block: small sizes are one run
        with adaptcoll.configured(**found[0].overrides(coll), **{f"{coll}_native_below": 0}) as s:
            assert s.algorithm(coll) == "ring:segment_size=524288,max_segments=0"
    assert all(c.algorithm != "ring" for c in candidates("bcast", 4))
    ag, rs = make_buffers("allgather", 4 * K, "float32", 3), make_buffers("reduce_scatter", 4 * K, "float64", 3)
    assert (ag.send.size, ag.recv.size, rs.send.size, rs.recv.size) == (341, 1023, 510, 170)


def test_cli_and_show_know_allgather_and_reduce_scatter(tmp_path, capsys):
    assert cli.parse_collectives("reduce_scatter,bcast,allgather") == ["bcast", "allgather", "reduce_scatter"]
    assert cli.default_budget(cli.parse_collectives(",".join(table.COLLECTIVES))) == 300
    path = tmp_path / "b.json"
    table.write(path, _table(_entry("reduce_scatter", 16 * M, size=2, config=RING_1M, ratio=2.5), _entry(nbytes=M)))
    assert cli.main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "reduce_scatter (host memory), 2 ranks, 1 node(s), 2 ranks per node (bytes: the whole array)" in out
    assert "16M  adaptcoll   2.50" in out and "ring seg=1M max_segments=0" in out

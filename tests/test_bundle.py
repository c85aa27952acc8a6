"""`phasejax.bundle`: round trips of every file kind, optional and derived files, the errors naming what is missing."""

import dataclasses
import os

import numpy as np
import pytest

from phasejax.bundle import BundleFile, ResultBundle, read_bundle, write_bundle


@dataclasses.dataclass(frozen=True)
class Toy(ResultBundle):
    runs: dict
    arrays: dict
    config: dict
    extra: dict = dataclasses.field(default_factory=dict)

    FILES = (BundleFile("runs.csv", columns=("alpha", "seed", "init", "ok"), required=dict(alpha="number", seed="int"),
                        dtypes={"init": str, "ok": bool}),
             BundleFile("arrays.npz", required=("w",)),
             BundleFile("config.json", required=("steps",)),
             BundleFile("extra_table.csv", field="extra", optional=True),
             BundleFile("summary.json", derived=True))

    def to_files(self):
        return dict(super().to_files(), summary=dict(n_runs=len(self.runs["alpha"])))

    @classmethod
    def from_files(cls, contents, out_dir):
        if "ok" not in contents["runs"]:          # an older file without the column: every run ok
            contents["runs"]["ok"] = np.ones(len(contents["runs"]["alpha"]), bool)
        return cls(**contents)


def _toy(extra=True):
    runs = dict(seed=np.array([0, 1, 2]), alpha=np.array([0.1, 1 / 3, np.nan]), init=np.array(["1", "b", "c"]),
                ok=np.array([True, False, True]))
    arrays = dict(w=np.arange(6, dtype=np.float32).reshape(2, 3), tokens=np.array([3, 1, 2], np.int64))
    return Toy(runs=runs, arrays=arrays, config=dict(steps=10, name="toy", grid=[0.5, 1.0]),
               extra=dict(k=np.array([1, 2])) if extra else {})


def test_round_trip_of_every_kind(tmp_path):
    toy = _toy()
    paths = toy.write(str(tmp_path))
    assert [os.path.basename(p) for p in paths] == ["runs.csv", "arrays.npz", "config.json", "extra_table.csv",
                                                    "summary.json"]
    assert (tmp_path / "runs.csv").read_text().splitlines()[0] == "alpha,seed,init,ok"     # the declared order
    back = Toy.load(str(tmp_path))
    np.testing.assert_array_equal(back.runs["alpha"], toy.runs["alpha"])           # floats exact, NaN kept
    assert back.runs["seed"].tolist() == [0, 1, 2] and back.runs["init"].tolist() == ["1", "b", "c"]
    assert back.runs["ok"].dtype == bool and back.runs["ok"].tolist() == [True, False, True]
    for k, v in toy.arrays.items():
        assert back.arrays[k].dtype == v.dtype
        np.testing.assert_array_equal(back.arrays[k], v)
    assert back.config == toy.config and back.extra["k"].tolist() == [1, 2]
    # writing what was read gives the same bytes
    before = {p: open(p, "rb").read() for p in paths}
    assert [open(p, "rb").read() for p in back.write(str(tmp_path))] == list(before.values())


def test_optional_files_absent_empty_and_stale_copy_removed(tmp_path):
    _toy().write(str(tmp_path))
    assert (tmp_path / "extra_table.csv").exists()
    paths = _toy(extra=False).write(str(tmp_path))
    assert "extra_table.csv" not in [os.path.basename(p) for p in paths]
    assert not (tmp_path / "extra_table.csv").exists()                      # the stale table went with it
    assert Toy.load(str(tmp_path)).extra == {}


def test_derived_files_are_written_not_read(tmp_path):
    _toy().write(str(tmp_path))
    assert (tmp_path / "summary.json").read_text().strip() == '{\n  "n_runs": 3\n}'
    os.remove(tmp_path / "summary.json")
    assert Toy.load(str(tmp_path)).config["steps"] == 10


def test_legacy_hook_fills_a_column_older_files_lack(tmp_path):
    toy = _toy()
    toy.write(str(tmp_path))
    text = (tmp_path / "runs.csv").read_text().splitlines()
    (tmp_path / "runs.csv").write_text("\n".join(line.rsplit(",", 1)[0] for line in text) + "\n")
    assert Toy.load(str(tmp_path)).runs["ok"].tolist() == [True, True, True]


def test_missing_file_and_missing_column_are_named(tmp_path):
    _toy().write(str(tmp_path))
    os.remove(tmp_path / "arrays.npz")
    with pytest.raises(FileNotFoundError) as info:
        Toy.load(str(tmp_path))
    assert info.value.filename == str(tmp_path / "arrays.npz")
    _toy().write(str(tmp_path))
    (tmp_path / "runs.csv").write_text("alpha,init\n0.5,a\n")
    with pytest.raises(ValueError, match=r"runs.csv lacks the column seed \(has alpha, init\)"):
        Toy.load(str(tmp_path))
    (tmp_path / "runs.csv").write_text("alpha,seed\n0.5,x\n")
    with pytest.raises(ValueError, match=r"runs.csv, column 'seed', line 2: expected an integer"):
        Toy.load(str(tmp_path))
    _toy().write(str(tmp_path))
    (tmp_path / "config.json").write_text('{"name": "toy"}')
    with pytest.raises(ValueError, match=r"config.json lacks the key steps"):
        Toy.load(str(tmp_path))
    (tmp_path / "config.json").write_text("[1]")
    with pytest.raises(ValueError, match=r"config.json must hold a JSON object"):
        Toy.load(str(tmp_path))
    _toy().write(str(tmp_path))
    (tmp_path / "arrays.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=r"arrays.npz is not a readable NPZ file"):
        Toy.load(str(tmp_path))


def test_functions_and_declaration_checks(tmp_path):
    files = (BundleFile("a.csv", min_rows=2), BundleFile("b.json", field="doc"))
    paths = write_bundle(str(tmp_path / "new"), files, dict(a=dict(x=np.array([1, 2])), doc=dict(y=1)))
    assert [os.path.basename(p) for p in paths] == ["a.csv", "b.json"]
    back = read_bundle(str(tmp_path / "new"), files)
    assert back["a"]["x"].tolist() == [1, 2] and back["doc"] == dict(y=1)
    with pytest.raises(ValueError, match="at least 3"):
        read_bundle(str(tmp_path / "new"), (BundleFile("a.csv", min_rows=3),))
    with pytest.raises(ValueError, match="no content for 'b.json'"):
        write_bundle(str(tmp_path), files, dict(a=dict(x=np.array([1]))))
    with pytest.raises(ValueError, match="name"):
        BundleFile("runs.txt")
    with pytest.raises(ValueError, match="columns"):
        BundleFile("a.npz", columns=("x",))

    @dataclasses.dataclass
    class WriteOnly(ResultBundle):
        n: int
        FILES = (BundleFile("n.json", derived=True),)

        def to_files(self):
            return dict(n=dict(n=self.n))

    WriteOnly(3).write(str(tmp_path / "w"))
    with pytest.raises(TypeError, match="written only"):
        WriteOnly.load(str(tmp_path / "w"))

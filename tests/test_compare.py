"""The tests' comparison of recomputed outputs (`tests/_compare.py`): a number one unit in the last place apart is
the same, one beyond the tolerance is not and the message names file, column, row and both values; NaN equals
NaN; integers, strings and the set of columns, rows and keys compare exactly; figures by their size."""

import json

import numpy as np
import pytest

from phasejax.io import atomic_save_npz, write_csv

from _compare import (
    RTOL_REDERIVED, assert_same_arrays, assert_same_csv, assert_same_json, assert_same_npz, assert_same_outputs,
    png_size,
)

ALPHA_C = 1.678884222858058          # the next float up is 1.6788842228580583


def _table(**change):
    return dict(dict(omega=np.array([0.3, 0.4]), alpha_c=np.array([ALPHA_C, np.nan]),
                     status=np.array(["in_grid", "above_grid"]), n=np.array([3, 4])), **change)


def _csv(path, **change):
    return write_csv(str(path), _table(**change))


def test_csv_numbers_within_the_tolerance_are_the_same(tmp_path):
    up = float(np.nextafter(ALPHA_C, 2.0))
    assert repr(up) == "1.6788842228580583"
    assert_same_csv(_csv(tmp_path / "a.csv", alpha_c=np.array([up, np.nan])), _csv(tmp_path / "t.csv"))
    far = _csv(tmp_path / "b.csv", alpha_c=np.array([ALPHA_C * (1 + 1e-9), np.nan]))
    with pytest.raises(AssertionError, match=r"t.csv, column 'alpha_c', row 0: got '1.678884224.*', want "
                                             r"'1.678884222858058'"):
        assert_same_csv(far, _csv(tmp_path / "t.csv"))
    assert_same_csv(far, tmp_path / "t.csv", tolerances={"alpha_c": (1e-8, 0.0)})      # a column's own tolerance


@pytest.mark.parametrize("change, match", [
    (dict(alpha_c=np.array([ALPHA_C, 1.0])), r"column 'alpha_c', row 1: got '1.0', want ''"),     # NaN is NaN only
    (dict(status=np.array(["in_grid", "below_grid"])), r"column 'status', row 1"),
    (dict(n=np.array([3, 5])), r"column 'n', row 1: got '5', want '4'"),                         # integers exactly
    (dict(n=np.array([3.0, 4.0])), r"column 'n', row 0: got '3.0', want '3'"),                   # and their kind
    (dict(extra=np.array([1, 2])), "columns differ"),
])
def test_csv_differences_are_named(tmp_path, change, match):
    with pytest.raises(AssertionError, match=match):
        assert_same_csv(_csv(tmp_path / "a.csv", **change), _csv(tmp_path / "t.csv"))


def test_csv_rows_must_match(tmp_path):
    short = write_csv(str(tmp_path / "a.csv"), {k: v[:1] for k, v in _table().items()})
    with pytest.raises(AssertionError, match="1 rows, want 2"):
        assert_same_csv(short, _csv(tmp_path / "t.csv"))


def test_json_compares_numbers_by_value_and_the_rest_exactly(tmp_path):
    def doc(path, **change):
        (tmp_path / path).write_text(json.dumps(dict(dict(a=[ALPHA_C, None], b="x", c=3, d=True), **change)))
        return tmp_path / path

    assert_same_json(doc("a.json", a=[float(np.nextafter(ALPHA_C, 2.0)), None]), doc("s.json"))
    for change, match in ((dict(a=[ALPHA_C * 1.01, None]), r"s.json.a\[0\]: got 1.69"), (dict(c=4), r"s.json.c"),
                          (dict(c=3.0), r"s.json.c: got 3.0, want 3"), (dict(a=[ALPHA_C, 1.0]), r"s.json.a\[1\]"),
                          (dict(d=False), r"s.json.d"), (dict(e=1), "keys differ")):
        with pytest.raises(AssertionError, match=match):
            assert_same_json(doc("a.json", **change), doc("s.json"))


def test_arrays_and_npz(tmp_path):
    want = dict(x=np.array([[1.0, np.nan], [0.0, -2.0]]), k=np.arange(3))
    assert_same_arrays(dict(x=want["x"] * (1 + 1e-13), k=np.arange(3)), want)
    with pytest.raises(AssertionError, match=r"runs, 'x', row \(0, 0\): got 1.1, want 1.0 .*2 of 4 differ"):
        assert_same_arrays(dict(x=want["x"] * 1.1, k=np.arange(3)), want, name="runs")
    with pytest.raises(AssertionError, match=r"'k', row 2"):
        assert_same_arrays(dict(x=want["x"], k=np.array([0, 1, 3])), want)
    a, b = atomic_save_npz(str(tmp_path / "a.npz"), want), atomic_save_npz(str(tmp_path / "b.npz"), want)
    assert_same_npz(a, b, rtol=RTOL_REDERIVED)


def test_folders_compare_each_file_by_its_kind_and_figures_by_size(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for name, shift, size in (("got", 1e-15, (4, 3)), ("want", 0.0, (4, 3)), ("other", 0.0, (5, 3))):
        (tmp_path / name).mkdir()
        _csv(tmp_path / name / "t.csv", alpha_c=np.array([ALPHA_C + shift, np.nan]))
        fig = plt.figure(figsize=size, dpi=50)
        fig.gca().plot([0, 1], [shift, 1])
        fig.savefig(tmp_path / name / "t.png")
        plt.close(fig)
    assert png_size(tmp_path / "got" / "t.png") == (200, 150)
    assert_same_outputs(tmp_path / "got", tmp_path / "want")
    with pytest.raises(AssertionError, match=r"t.png: \(250, 150\), want \(200, 150\)"):
        assert_same_outputs(tmp_path / "other", tmp_path / "want")
    (tmp_path / "got" / "t.png").write_bytes(b"\x89PNG\r\n\x1a\n damaged")
    with pytest.raises(AssertionError, match="t.png is not a PNG image"):
        assert_same_outputs(tmp_path / "got", tmp_path / "want")
    for name in ("got", "want"):
        (tmp_path / name / "notes.txt").write_text("x")
    with pytest.raises(AssertionError, match="notes.txt: no rule"):
        assert_same_outputs(tmp_path / "want", tmp_path / "want")

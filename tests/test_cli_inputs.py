"""Every bad input is one clear line, in every command: damaged files read back, flags a mode never reads,
another command's folder, messages that name the flag as typed, no folder left behind by a refusal.

Each case runs the command as a user would write it, on a temporary folder, and asserts the exit code, the one
line `phasejax <cmd>: error: ...` naming the flag or the file and its column, and that no file was created or
changed. Every case is refused before any compute (the expensive part is never reached), so the file runs in
seconds; the one that runs every replot on the committed results is marked slow.
"""

import csv
import json
import os
import shutil

import pytest

from phasejax.cli import build_parser, main
from phasejax.commands.argtypes import OUTPUT_MARKER, guard_output

from _cli import one_error_line, snapshot

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "results")


def copy_files(src: str, dst, names) -> str:
    """Copy the files `names` (paths relative to `src`) of a committed folder into `dst`; returns `dst`."""
    for name in names:
        os.makedirs(os.path.dirname(os.path.join(dst, name)), exist_ok=True)
        shutil.copy(os.path.join(src, name), os.path.join(dst, name))
    return str(dst)


def drop_column(path, column: str) -> None:
    """Remove `column` from the CSV file `path`."""
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    j = rows[0].index(column)
    with open(path, "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows([r[:j] + r[j + 1:] for r in rows])


def drop_key(path, key: str) -> None:
    """Remove `key` (dotted for a nested one) from the JSON file `path`."""
    with open(path) as fh:
        obj = json.load(fh)
    node, parts = obj, key.split(".")
    for part in parts[:-1]:
        node = node[part]
    del node[parts[-1]]
    with open(path, "w") as fh:
        json.dump(obj, fh)


def drop_array(path, name: str) -> None:
    """Remove the array `name` from the NPZ file `path`."""
    import numpy as np

    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files if k != name}
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


def drop(path, what: str) -> None:
    {"csv": drop_column, "json": drop_key, "npz": drop_array}[str(path).rsplit(".", 1)[-1]](path, what)


# ----------------------------------------------------------------------------
# Damaged files read back: refused before any compute or write, naming the file and the column
# ----------------------------------------------------------------------------


def test_extension_replot_without_a_runs_column(tmp_path, run_cli):
    """`extension untied --replot --out DIR --overwrite` with `train_loss` removed from runs.csv (a KeyError)."""
    out = copy_files(os.path.join(RESULTS, "extensions", "untied"), tmp_path / "untied",
                     ["theory.csv", "runs.csv", "thresholds.csv", "summary.json", "untied.png"])
    drop_column(os.path.join(out, "runs.csv"), "train_loss")
    before = snapshot(out)
    code, stdout, err = run_cli(["extension", "untied", "--replot", "--out", out, "--overwrite"])
    assert code == 2 and stdout == ""
    line = one_error_line(err, "extension")
    assert f"{os.path.join(out, 'runs.csv')} lacks the column train_loss" in line and "--replot" in line
    assert snapshot(out) == before


def test_dynamics_replot_without_a_runs_column(tmp_path, run_cli):
    """`dynamics --replot --out DIR --overwrite` with `mechanism` removed from runs.csv: trajectories.png was
    rewritten before the KeyError."""
    names = ["ode.csv", "sgd_trajectories.csv", "phase_diagram.csv", "runs.csv", "summary.json", "trajectories.png"]
    out = copy_files(os.path.join(RESULTS, "dynamics"), tmp_path / "dynamics", names)
    drop_column(os.path.join(out, "runs.csv"), "mechanism")
    before = snapshot(out)
    code, stdout, err = run_cli(["dynamics", "--replot", "--out", out, "--overwrite"])
    assert code == 2 and stdout == ""
    assert "runs.csv lacks the column mechanism" in one_error_line(err, "dynamics")
    assert snapshot(out) == before


@pytest.fixture
def rs_dir(tmp_path):
    """A copy of the committed phase diagram, as `rsb --rs-dir` and `bracket --rs-dir` read it."""
    return copy_files(os.path.join(RESULTS, "phase_diagram"), tmp_path / "rs",
                      ["diagram.csv", "points.csv", "thresholds.csv", "summary.json"])


def test_rsb_with_a_damaged_rs_dir_is_refused_before_computing(tmp_path, rs_dir, run_cli):
    """`rsb --rs-dir DIR` with `e_positional` removed from diagram.csv crashed after about 30 s of computing, and
    left an empty --out behind."""
    drop_column(os.path.join(rs_dir, "diagram.csv"), "e_positional")
    before = snapshot(rs_dir)
    out = tmp_path / "out"
    code, stdout, err = run_cli(["rsb", "--rs-dir", rs_dir, "--omegas", "0.3", "--out", str(out)])
    assert code == 2 and stdout == ""
    line = one_error_line(err, "rsb")
    assert "diagram.csv lacks the column e_positional" in line and "--rs-dir" in line
    assert snapshot(rs_dir) == before and not out.exists()


def test_a_missing_config_key_of_the_rs_dir_is_named(tmp_path, rs_dir, run_cli):
    drop_key(os.path.join(rs_dir, "summary.json"), "config.lam")
    code, _, err = run_cli(["rsb", "--rs-dir", rs_dir, "--out", str(tmp_path / "out")])
    assert code == 2 and "summary.json lacks the key config.lam" in one_error_line(err, "rsb")
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------
# Flags accepted and ignored, or contradictions accepted
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("argv,needle", [
    (["extension", "untied", "--replot", "--preset", "gpu"], "--preset is not used by --replot"),
    (["counting", "--replot", "--preset", "proposition"], "--preset is not used by --replot"),
    (["depth", "--layers", "3", "--no-study"], "--no-study is not used with --layers 3"),
    (["bracket", "--no-rs", "--rs-dir", "DIR"], "--rs-dir is not used with --no-rs"),
    (["bench", "--parts", "warm_point", "--no-project"], "--no-project is not used with --parts without "
                                                         "paper_diagram"),
    (["bench", "--parts", "warm_point", "--baseline", "DIR"], "--baseline is not used with --parts without program"),
    (["bench", "--parts", "warm_point", "warm_point"], "--parts repeats warm_point"),
    (["depth", "--skip-grid", "1,1"], "argument --skip-grid: repeats 1"),
    (["dynamics", "--learning-rate", "0.5", "--learning-rate-paper", "0.5"],
     "--learning-rate and --learning-rate-paper are both 0.5"),
    (["replicas", "--merge", "DIR"], "--merge is not used without --replot"),
    (["extension", "rank2", "--tied-thresholds", "DIR"], "--tied-thresholds is not used with an extension other"),
])
def test_a_flag_the_mode_never_reads_or_a_contradiction_is_refused(argv, needle, tmp_path, run_cli):
    """Each was accepted and ignored (`extension untied --replot --preset gpu` printed "(gpu preset) done" over the
    cpu preset's files; `bracket --no-rs --rs-dir DIR` started the whole CPU preset; the repeated part was dropped
    without a word)."""
    argv = [a.replace("DIR", str(tmp_path / "elsewhere")) for a in argv] + ["--out", str(tmp_path / "out")]
    code, stdout, err = run_cli(argv)
    assert code == 2 and stdout == "", err
    assert needle in one_error_line(err, argv[0])
    assert snapshot(tmp_path) == {}                 # nothing computed, no folder created


def test_depth_accepts_seed_zero(tmp_path, run_cli, monkeypatch):
    """`depth --seed 0` was refused ("must be a positive integer"); seed 0 is a seed."""
    seen = []
    monkeypatch.setattr("phasejax.commands.depth.run", lambda args: seen.append(args.seed) or 0)
    assert build_parser().parse_args(["depth", "--seed", "0"]).seed == 0
    code, _, err = run_cli(["depth", "--seed", "0", "--out", str(tmp_path / "out")])
    assert code == 0 and seen == [0], err


# ----------------------------------------------------------------------------
# Another command's folder taken as its own
# ----------------------------------------------------------------------------

EXTENSION_FILES = ["theory.csv", "runs.csv", "thresholds.csv", "summary.json", "rank2.png"]


def test_extension_replot_refuses_another_extensions_folder(tmp_path, run_cli):
    """`extension untied --replot --out DIR`, DIR holding the rank2 extension's results written by `extension rank2`:
    it rewrote rank2's runs.csv, thresholds.csv and summary.json."""
    out = copy_files(os.path.join(RESULTS, "extensions", "rank2"), tmp_path / "rank2", EXTENSION_FILES)
    summary = os.path.join(out, "summary.json")
    with open(summary) as fh:
        recorded = dict(json.load(fh), command=f"phasejax extension rank2 --out {out}")
    with open(summary, "w") as fh:
        json.dump(recorded, fh)
    guard_output(out, True, dict(name="rank2", preset="cpu", tied_thresholds=None), command="extension")
    before = snapshot(out)
    for extra in ([], ["--overwrite"]):
        code, stdout, err = run_cli(["extension", "untied", "--replot", "--out", out, *extra])
        assert code == 2 and stdout == ""
        line = one_error_line(err, "extension")
        assert "rank2" in line and "untied" in line and "--out" in line
        assert snapshot(out) == before


def test_extension_replot_refuses_a_committed_folder_of_another_extension(tmp_path, run_cli):
    """A copy of the committed rank2 results (no marker, no command line: the summary names the extension), even
    with --overwrite."""
    out = copy_files(os.path.join(RESULTS, "extensions", "rank2"), tmp_path / "rank2", EXTENSION_FILES)
    before = snapshot(out)
    code, _, err = run_cli(["extension", "untied", "--replot", "--out", out, "--overwrite"])
    assert code == 2
    assert "summary.json names extension rank2" in one_error_line(err, "extension")
    assert snapshot(out) == before


def test_replot_refuses_a_folder_whose_summary_records_another_command(tmp_path, run_cli):
    out = copy_files(os.path.join(RESULTS, "scaling"), tmp_path / "scaling", ["runs.csv", "summary.json"])
    before = snapshot(out)
    code, _, err = run_cli(["random-init", "--replot", "--out", out, "--overwrite"])
    assert code == 2
    line = one_error_line(err, "random-init")
    assert "the results of `phasejax scaling`, not of `phasejax random-init`" in line
    assert snapshot(out) == before


def test_a_run_dir_holding_a_users_files_is_refused(tmp_path, run_cli):
    """`phase-diagram ... --run-dir DIR`, DIR holding a user's files: it wrote config.json, chunks/ and a lock."""
    run_dir = tmp_path / "mine"
    (run_dir / "notes").mkdir(parents=True)
    (run_dir / "notes" / "todo.txt").write_text("keep\n")
    (run_dir / "data.csv").write_text("a\n1\n")
    before = snapshot(run_dir)
    code, stdout, err = run_cli(["phase-diagram", "--n-alpha", "2", "--n-omega", "1", "--run-dir", str(run_dir),
                                 "--out", str(tmp_path / "out")])
    assert code == 2 and stdout == ""
    line = one_error_line(err, "phase-diagram")
    assert f"--run-dir {run_dir} holds files that are not a phasejax run's" in line and "data.csv" in line
    assert snapshot(run_dir) == before and sorted(os.listdir(run_dir)) == ["data.csv", "notes"]
    assert not (tmp_path / "out").exists()


def test_a_run_directory_of_runs_is_not_foreign(tmp_path):
    """A command's run directory holds the run directories of its sweeps (config.json, chunks/, locks): accepted."""
    from phasejax.sweep import foreign_entries

    for sweep in ("theory", "runs_d100"):
        (tmp_path / "run" / sweep / "chunks").mkdir(parents=True)
        (tmp_path / "run" / sweep / "config.json").write_text("{}")
        (tmp_path / "run" / sweep / ".lock-0").write_text("pid 1")
        (tmp_path / "run" / sweep / "chunks" / "chunk_00000.npz.rejected").write_text("x")
    assert foreign_entries(str(tmp_path / "run")) == [] and foreign_entries(str(tmp_path / "new")) == []
    (tmp_path / "run" / "theory" / "mine.txt").write_text("x")
    assert foreign_entries(str(tmp_path / "run")) == [os.path.join("theory", "mine.txt")]


# ----------------------------------------------------------------------------
# Messages that name the flag as it is typed
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["abc", "", "=-1,0", "-1,0", "nan", "1,,2"])
def test_depth_skip_grid_messages_name_the_flag(value, tmp_path, run_cli):
    """`invalid _floats value`, `expected one argument` (for -1,0), and nan not naming the flag at all."""
    code, stdout, err = run_cli(["depth", "--skip-grid", value, "--out", str(tmp_path / "out")])
    assert code == 2 and stdout == ""
    line = one_error_line(err, "depth")
    assert "argument --skip-grid: expected comma-separated non-negative numbers such as 0,1,4, got " in line, line
    assert snapshot(tmp_path) == {}


def test_rsb_log2_n_is_named_as_typed(tmp_path, run_cli):
    """`rsb --log2-n 60` said `log2_n must be <= 20`, and left an empty --out."""
    code, _, err = run_cli(["rsb", "--log2-n", "60", "--out", str(tmp_path / "out")])
    assert code == 2
    assert "argument --log2-n: must be an integer from 1 to 20, got 60" in one_error_line(err, "rsb")
    assert snapshot(tmp_path) == {}


def test_a_library_parameter_in_an_error_is_written_as_its_flag():
    from phasejax.cli import name_flags, subparser

    rsb = subparser(build_parser(), "rsb")
    assert name_flags("log2_n must be <= 20, got 60", rsb, {"log2_n"}) == "--log2-n must be <= 20, got 60"
    assert name_flags("log2_n must be <= 20, got 60", rsb, set()) == "log2_n must be <= 20, got 60"


def test_bench_out_that_is_a_file(tmp_path, run_cli):
    """`bench --out FILE` said `cannot create the folder ... (File exists)`."""
    record = tmp_path / "record.json"
    record.write_text("{}\n")
    code, _, err = run_cli(["bench", "--out", str(record)])
    assert code == 2
    assert f"--out {record} is a file, not a folder; pass a folder to --out" in one_error_line(err, "bench")
    assert record.read_text() == "{}\n" and sorted(os.listdir(tmp_path)) == ["record.json"]


def test_solve_nodes_bound_is_the_one_help_states(run_cli):
    """`solve --help` said at most 64 nodes; 60 was refused ("56 or fewer")."""
    from phasejax.commands.solve import MAX_NODES, MAX_POINTS

    assert MAX_NODES ** 4 <= MAX_POINTS < (MAX_NODES + 1) ** 4
    _, out, _ = run_cli(["solve", "--help"])
    assert f"at most {MAX_NODES}" in " ".join(out.split()) and "at most 64" not in " ".join(out.split())
    code, _, err = run_cli(["solve", "--alphas", "1", "--omegas", "0.3", "--nodes", "60"])
    assert code == 2 and f"argument --nodes: must be an integer from 1 to {MAX_NODES}, got 60" in err
    assert build_parser().parse_args(["solve", "--nodes", str(MAX_NODES)]).nodes == MAX_NODES


# ----------------------------------------------------------------------------
# Empty folders left behind, and the default --rs-dir outside the checkout
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("flag,needle", [("--baseline", "no phasejax package there"),
                                         ("--reference", "no such file")])
def test_bench_refusals_leave_no_folder(flag, needle, tmp_path, run_cli):
    parts = {"--baseline": "program", "--reference": "batch"}[flag]
    out = tmp_path / "new" / "bench"
    code, _, err = run_cli(["bench", "--parts", parts, flag, str(tmp_path / "missing"), "--out", str(out)])
    assert code == 2 and needle in one_error_line(err, "bench")
    assert snapshot(tmp_path) == {} and not (tmp_path / "new").exists()


def test_default_rs_dir_is_found_outside_the_checkout(tmp_path, run_cli, monkeypatch):
    """Outside the checkout `bracket --replot` dropped the RS comparison with a note and exit 0: the default is the
    repository's results/phase_diagram, whatever the working directory."""
    out = copy_files(os.path.join(RESULTS, "rsb"), tmp_path / "rsb", ["bracket_tasks.csv", "bracket_summary.json"])
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["bracket", "--replot", "--out", out, "--overwrite"])
    assert code == 0, err
    with open(os.path.join(out, "bracket_summary.json")) as fh:
        rs = json.load(fh)["replica_symmetric"]
    assert rs is not None and rs["source"] == os.path.join(RESULTS, "phase_diagram")


@pytest.mark.parametrize("argv", [["rsb"], ["bracket", "--replot", "--overwrite"], ["bracket"]])
def test_a_missing_default_rs_dir_is_one_line(argv, tmp_path, run_cli, monkeypatch):
    """An installed package has no results/: the line says to pass --rs-dir (bracket: or --no-rs)."""
    monkeypatch.setattr("phasejax.commands.flags.repository_results", lambda *p: str(tmp_path / "none" / "pd"))
    out = tmp_path / "out"
    if "--replot" in argv:
        copy_files(os.path.join(RESULTS, "rsb"), out, ["bracket_tasks.csv"])
    before = snapshot(tmp_path)
    code, _, err = run_cli([*argv, "--out", str(out)])
    assert code == 2
    line = one_error_line(err, argv[0])
    assert "--rs-dir" in line and "lacks diagram.csv" in line and "pass --rs-dir" in line
    assert ("--no-rs" in line) == (argv[0] == "bracket")
    assert snapshot(tmp_path) == before and (out.exists() == ("--replot" in argv))


# ----------------------------------------------------------------------------
# No traceback on a damaged results folder: every required column of every replotted file removed in turn
# ----------------------------------------------------------------------------

REPLOTS = {   # command line (DIR: the folder), committed folder
    "extension untied": (["extension", "untied", "--replot", "--out", "DIR", "--overwrite"], "extensions/untied"),
    "extension rank2": (["extension", "rank2", "--replot", "--out", "DIR", "--overwrite"], "extensions/rank2"),
    "extension correlated": (["extension", "correlated", "--replot", "--out", "DIR", "--overwrite"],
                             "extensions/correlated"),
    "extension value": (["extension", "value", "--replot", "--out", "DIR", "--overwrite"], "extensions/value"),
    "extension general_L": (["extension", "general_L", "--replot", "--out", "DIR", "--overwrite"],
                            "extensions/general_L"),
    "extension second_A": (["extension", "second_A", "--replot", "--out", "DIR", "--overwrite"],
                           "extensions/second_A"),
    "extension huber": (["extension", "huber", "--replot", "--out", "DIR", "--overwrite"], "extensions/huber"),
    "dynamics": (["dynamics", "--replot", "--out", "DIR", "--overwrite"], "dynamics"),
    "fig2": (["fig2", "--replot", "--out", "DIR", "--overwrite"], "fig2"),
    "gamp": (["gamp", "--replot", "--out", "DIR", "--overwrite"], "gamp"),
    "histogram": (["histogram", "--replot", "--out", "DIR", "--overwrite"], "histogram"),
    "random-init": (["random-init", "--replot", "--out", "DIR", "--overwrite"], "random_init"),
    "replicas": (["replicas", "--replot", "--no-se", "--out", "DIR", "--overwrite"], "replica"),
    "scaling": (["scaling", "--replot", "--out", "DIR", "--overwrite"], "scaling"),
    "counting": (["counting", "--replot", "--out", "DIR", "--overwrite"], "counting"),
    "bracket": (["bracket", "--replot", "--no-rs", "--out", "DIR", "--overwrite"], "rsb"),
}


def replot_reads(name: str, folder: str) -> list:
    """The `Reads` the command of `REPLOTS[name]` declares for a replot of `folder`."""
    argv = [a.replace("DIR", folder) for a in REPLOTS[name][0]]
    args = build_parser().parse_args(argv)
    return [r for r in args._reads(args)]


def _cases():
    for name, (_, committed) in REPLOTS.items():
        folder = os.path.join(RESULTS, committed)
        for r in replot_reads(name, folder):
            for need in r.needs:
                yield pytest.param(name, os.path.relpath(r.path, folder), need.split("|")[0],
                                   id=f"{name}-{os.path.relpath(r.path, folder)}-{need}")


def _copy_read_files(name: str, dst) -> str:
    src = os.path.join(RESULTS, REPLOTS[name][1])
    names = [os.path.relpath(r.path, src) for r in replot_reads(name, src) if os.path.exists(r.path)]
    if os.path.exists(os.path.join(src, "summary.json")):
        names.append("summary.json")
    return copy_files(src, dst, sorted(set(names)))


@pytest.mark.parametrize("name,file,column", list(_cases()))
def test_each_required_column_removed_in_turn_is_one_line(name, file, column, tmp_path, run_cli):
    out = _copy_read_files(name, tmp_path / "out")
    drop(os.path.join(out, file), column)
    before = snapshot(out)
    argv = [a.replace("DIR", out) for a in REPLOTS[name][0]]
    code, stdout, err = run_cli(argv)
    assert code == 2, err
    what = {"csv": "column", "json": "key", "npz": "array"}[file.rsplit(".", 1)[-1]]
    assert f"{os.path.join(out, file)} lacks the {what} {column}" in one_error_line(err, argv[0])
    assert stdout == "" and snapshot(out) == before


def test_every_replot_declares_what_it_reads():
    """Each command with --replot declares its files (a file of REPLOTS without a declaration would go untested)."""
    from phasejax.cli import command_modules, subparser

    parser = build_parser()
    with_replot = {n for n in command_modules() if "--replot" in subparser(parser, n)._option_string_actions}
    assert with_replot == {n.split()[0] for n in REPLOTS}
    for name in REPLOTS:
        assert replot_reads(name, os.path.join(RESULTS, REPLOTS[name][1])), name


REPLICON_COLUMNS = ("replicon", "replicon_err", "replicon_regular", "replicon_regular_err", "replicon_jump",
                    "replicon_jump_err", "two_minima")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REPLOTS))
def test_every_replot_runs_on_the_declared_columns_alone(name, tmp_path, run_cli):
    """The declarations are complete: the committed folder with every column (and JSON key) the command does not
    declare removed replots without an error (an extension keeps its theory table's replicon columns, which it
    would otherwise compute)."""
    out = _copy_read_files(name, tmp_path / "out")
    for r in replot_reads(name, out):
        keep = {n for need in r.needs for n in need.split("|")}
        if r.path.endswith(".csv"):
            with open(r.path, newline="") as fh:
                header = next(csv.reader(fh))
            for column in header:
                if column not in keep and not (name.startswith("extension") and column in REPLICON_COLUMNS):
                    drop_column(r.path, column)
        elif r.path.endswith(".json") and os.path.exists(r.path):
            with open(r.path) as fh:
                keys = list(json.load(fh))
            for key in keys:
                if not any(k == key or k.startswith(key + ".") for k in keep):
                    drop_key(r.path, key)
    code, _, err = run_cli([a.replace("DIR", out) for a in REPLOTS[name][0]] + ["--no-progress"])
    assert code == 0, err


def test_the_extension_command_spells_the_librarys_names():
    from phasejax.commands.extension import USES_TIED
    from phasejax.extensions import USES_TIED as LIBRARY

    assert USES_TIED == LIBRARY


def test_bracket_replot_refuses_a_folder_whose_summary_records_another_command(tmp_path, run_cli):
    out = copy_files(os.path.join(RESULTS, "rsb"), tmp_path / "rsb", ["bracket_tasks.csv", "bracket_summary.json"])
    path = os.path.join(out, "bracket_summary.json")
    with open(path) as fh:
        summary = json.load(fh)
    summary["run"]["command"] = "phasejax replicas --out elsewhere"
    with open(path, "w") as fh:
        json.dump(summary, fh)
    before = snapshot(out)
    code, _, err = run_cli(["bracket", "--replot", "--no-rs", "--out", out, "--overwrite"])
    assert code == 2 and "not of `phasejax bracket`" in one_error_line(err, "bracket")
    assert snapshot(out) == before

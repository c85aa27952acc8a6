"""What the command-line tests check of a command's outcome: the files of a folder (to show none changed) and its
one error line."""

import hashlib
import os


def snapshot(folder) -> dict:
    """`{relative path: SHA-256}` of every file under `folder` (empty for a missing folder)."""
    out = {}
    for dirpath, _, files in os.walk(folder):
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, folder)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def one_error_line(err: str, command: str) -> str:
    """The one `phasejax <command>: error:` line of `err` (asserting there is exactly one and no traceback)."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("phasejax")]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"phasejax {command}: error: "), err
    return lines[0]

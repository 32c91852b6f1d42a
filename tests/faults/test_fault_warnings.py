"""Warnings on the command line are one clean line naming the file concerned, never a
line of evalq's source (``…/evalq/encode/cache.py:141: RuntimeWarning: …``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from faultkit import ROOT, write_recipe

from evalq.app.cli import main
from evalq.core import warnformat


def test_evalqs_warnings_are_one_line_and_others_keep_pythons_format() -> None:
    cache_py = str(ROOT / "eval" / "evalq" / "encode" / "cache.py")
    ours = warnformat.format_warning(RuntimeWarning("embedding cache file /c/x.npy is bad;\n"
                                                    "recomputing it"), RuntimeWarning,
                                     cache_py, 141)
    assert ours == "evalq: warning: embedding cache file /c/x.npy is bad; recomputing it\n"
    assert warnformat.format_warning("past the stack", RuntimeWarning, "sys", 1) == (
        "evalq: warning: past the stack\n")
    theirs = warnformat.format_warning("deprecated", DeprecationWarning, "/lib/numpy/x.py", 3)
    assert theirs.startswith("/lib/numpy/x.py:3: DeprecationWarning: deprecated")


@pytest.mark.slow
@pytest.mark.model
def test_a_corrupt_cache_chunk_and_a_dataset_warning_read_cleanly(tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path)
    assert main(["run", str(recipe)]) in (0, 1)
    chunks = sorted((tmp_path / "cache" / "embeddings").glob("*/*.npy"))
    for chunk in chunks:
        data = np.load(chunk)
        data[0, 0] = np.nan  # a vector evalq refuses to read back
        np.save(chunk, data)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "eval")}
    done = subprocess.run([sys.executable, "-c", "import sys; from evalq.app.cli import main; "
                           "sys.exit(main(sys.argv[1:]))", "run", str(recipe),
                           "--max-docs", "4"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
                          check=False)
    assert done.returncode in (0, 1), done.stderr
    lines = [ln for ln in done.stderr.splitlines() if "warning" in ln.lower()]
    cache_lines = [ln for ln in lines if "embedding cache file" in ln]
    assert cache_lines and all(ln.startswith("evalq: warning: embedding cache file ")
                               for ln in cache_lines), lines
    assert any(str(chunk) in cache_lines[0] for chunk in chunks)
    assert any(ln.startswith("evalq: warning: dataset 'tiny': max_docs=4") for ln in lines), lines
    assert "evalq/encode/" not in done.stderr and "RuntimeWarning" not in done.stderr
    assert "DatasetWarning" not in done.stderr and ".py:" not in done.stderr

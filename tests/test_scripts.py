"""The workflow's scripts as their jobs import them: a summary job imports no torch, which costs
each job that loads it about a second of CPU."""

import ast
import json
import subprocess
import sys

import pytest

from conftest import REPO

SCRIPTS = REPO / "workflow" / "scripts"
# Reports, when torch is first imported, the lines of the package that led to it.
SPY = """
import json, sys, traceback

class Spy:
    chain = []

    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not Spy.chain:
            stack = traceback.extract_stack()
            Spy.chain = [
                f"{f.filename[f.filename.find('d2lrepro'):]}:{f.lineno}"
                for f in stack
                if "d2lrepro" in f.filename
            ]
        return None

sys.meta_path.insert(0, Spy())
"""


def imports(script: str) -> str:
    """The import statements of ``script`` (a name under workflow/scripts), as source."""
    tree = ast.parse((SCRIPTS / f"{script}.py").read_text())
    statements = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    return "\n".join(ast.unparse(n) for n in statements)


@pytest.mark.parametrize("script", sorted(p.stem for p in SCRIPTS.glob("*_summary.py")))
def test_a_summary_job_imports_no_torch(script):
    check = f"{SPY}\n{imports(script)}\nprint(json.dumps(['torch' in sys.modules, Spy.chain]))"
    done = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, cwd=REPO / "workflow"
    )
    assert done.returncode == 0, done.stderr
    loaded, chain = json.loads(done.stdout.splitlines()[-1])
    assert not loaded, f"{script} imports torch through {' <- '.join(reversed(chain))}"

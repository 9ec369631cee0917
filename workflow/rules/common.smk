import os
import re
import sys
from pathlib import Path

# Scripts import the package from the workflow directory, whichever Python runs them (the
# project's virtual environment, or a conda environment made with --sdm conda).
PACKAGE_DIR = str(Path(workflow.basedir) / "workflow")
sys.path.insert(0, PACKAGE_DIR)
os.environ.update(
    PYTHONPATH=os.pathsep.join(
        filter(None, [PACKAGE_DIR, os.environ.get("PYTHONPATH")])
    )
)

from d2lrepro import claims, data, settings

ENV = "../../envs/d2lrepro.yaml"

# Validation happens here, at parse time: a bad config stops before any job runs.
SETTINGS = settings.resolve(config)
S = SETTINGS.values
LEDGER = claims.load(Path(workflow.basedir) / "workflow" / "claims.yaml")


def package(*modules):
    """Source files of package modules, as inputs: editing one reruns the rules that use it."""
    return [f"workflow/d2lrepro/{m}.py" for m in modules]


def figure(section, name, title):
    """A figure of the claims ledger, also flagged for `snakemake --report`."""
    return report(
        f"results/figures/{section}/{name}.png",
        caption=f"../../report/captions/{section}.rst",
        category=title,
        labels={"figure": name},
    )

import re
from pathlib import Path

from d2lrepro import claims, data, settings

# Validation happens here, at parse time: a bad config stops before any job runs.
SETTINGS = settings.resolve(config)
S = SETTINGS.values
LEDGER = claims.load(Path(workflow.basedir) / "workflow" / "claims.yaml")


def figure(section, name, title):
    """A figure of the claims ledger, also flagged for `snakemake --report`."""
    return report(
        f"results/figures/{section}/{name}.png",
        caption=f"../../report/captions/{section}.rst",
        category=title,
        labels={"figure": name},
    )

# Re-runs the optimization and computational-performance chapters of Dive into Deep Learning
# and reports, claim by claim, whether the book's results hold on this machine.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/optimization.smk"
include: "workflow/rules/performance.smk"
include: "workflow/rules/multidevice.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        paths.REPORT,
        ARCHIVE,
        FASHION_MNIST_DATA,
        AIRFOIL_DATA,

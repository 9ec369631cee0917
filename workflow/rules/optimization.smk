rule intro:
    input:
        code=package("intro", "plotting"),
    output:
        metrics="results/intro/metrics.csv",
        risk=figure("intro", "risk", "1. Optimization and deep learning"),
        local_min=figure("intro", "local_min", "1. Optimization and deep learning"),
        saddle_x3=figure("intro", "saddle_x3", "1. Optimization and deep learning"),
        saddle_x2y2=figure("intro", "saddle_x2y2", "1. Optimization and deep learning"),
        vanishing=figure("intro", "vanishing", "1. Optimization and deep learning"),
    log:
        "logs/intro.log",
    benchmark:
        "benchmarks/intro.tsv"
    conda:
        ENV
    params:
        step=S["intro"]["grid_step"],
    script:
        "../scripts/intro.py"

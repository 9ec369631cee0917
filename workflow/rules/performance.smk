# The computational-performance chapter: compilers and interpreters, asynchronous computation,
# automatic parallelism and the hardware. Every timing rule takes all cores so that nothing else
# runs beside a timing, and records the thread count it ran with.

# Each experiment's results directory, named once, as the Python side names it (core.paths).
HYBRIDIZE = paths.experiment("performance", "hybridize")
ASYNCHRONY = paths.experiment("performance", "asynchrony")
AUTOPAR = paths.experiment("performance", "autopar")
HARDWARE = paths.experiment("performance", "hardware")


# The machine's first torch.compile, on one core beside other jobs, before hybridize times the
# compile mode alone (d2lrepro.performance.hybridize_first_compile). What it leaves is torch's
# cache, not its record: the record is temporary, so that each hybridize job has it made first.
rule hybridize_first_compile:
    input:
        code=code("hybridize_first_compile"),
    output:
        temp(HYBRIDIZE / "first_compile.json"),
    log:
        "logs/hybridize_first_compile.log",
    benchmark:
        "benchmarks/hybridize_first_compile.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **needs(2000, 10),
    params:
        modes=S["hybridize"]["modes"],
    script:
        "../scripts/hybridize_first_compile.py"


rule hybridize:
    input:
        code=code("hybridize"),
        # none on a cluster, whose nodes do not share torch's cache folder (in /tmp)
        first_compile=only_here(rules.hybridize_first_compile.output[0]),
    output:
        metrics=HYBRIDIZE / "metrics.csv",
        machines=machines_of(HYBRIDIZE / "metrics.csv"),
        model=HYBRIDIZE / "my_mlp",
        figure=figure("hyb", "bench"),
    log:
        "logs/hybridize.log",
    benchmark:
        "benchmarks/hybridize.tsv"
    conda:
        ENV
    threads: timing_threads
    resources:
        **needs(4000, 60, gpus=1),
    params:
        ran_alone=TIMINGS_ALONE,
        hybridize=S["hybridize"],
        seed=S["seed"],
    script:
        "../scripts/hybridize.py"


rule asynchrony:
    input:
        code=code("asynchrony"),
    output:
        metrics=ASYNCHRONY / "metrics.csv",
        machines=machines_of(ASYNCHRONY / "metrics.csv"),
    log:
        "logs/asynchrony.log",
    benchmark:
        "benchmarks/asynchrony.tsv"
    conda:
        ENV
    threads: timing_threads
    resources:
        **needs(4000, 30, gpus=1),
    params:
        ran_alone=TIMINGS_ALONE,
        asynchrony=S["asynchrony"],
        seed=S["seed"],
    script:
        "../scripts/asynchrony.py"


# autopar asks for what its results keep on the host, by their sizes and counts, and the process.
AUTOPAR_MEM_MB = settings.autopar_mem_mb(S["autopar"])


rule autopar:
    input:
        code=code("autopar"),
    output:
        metrics=AUTOPAR / "metrics.csv",
        machines=machines_of(AUTOPAR / "metrics.csv"),
        figure=figure("autopar", "both"),
    log:
        "logs/autopar.log",
    benchmark:
        "benchmarks/autopar.tsv"
    conda:
        ENV
    threads: timing_threads
    resources:
        **needs(AUTOPAR_MEM_MB, 60, gpus=2),
    params:
        ran_alone=TIMINGS_ALONE,
        autopar=S["autopar"],
        seed=S["seed"],
    script:
        "../scripts/autopar.py"


rule hardware:
    input:
        code=code("hardware"),
    output:
        sweep=HARDWARE / "memory_sweep.csv",
        latency=HARDWARE / "latency.csv",
        metrics=HARDWARE / "metrics.csv",
        machines=machines_of(HARDWARE / "metrics.csv"),
        figure=figure("hw", "memory_sweep"),
    log:
        "logs/hardware.log",
    benchmark:
        "benchmarks/hardware.tsv"
    conda:
        ENV
    threads: timing_threads
    resources:
        **needs(4000, 30, gpus=1),
    params:
        ran_alone=TIMINGS_ALONE,
        hardware=S["hardware"],
    script:
        "../scripts/hardware.py"


CURVES += [rules.hardware.output.sweep, rules.hardware.output.latency]

# Training on 1 and 2 devices: each run is launched with torchrun by its script, takes all
# cores (so that its timing is its own) and is not applicable, not failed, where the machine
# lacks the devices. Where the run's plan already knows that (shortfall_of), the job is a
# light one: one core, no GPU and no torch, and writes what is not applicable. Where it knows
# that no claim can judge a job's time (unjudged_time), the job trains on a core for each worker
# and a share of a GPU, as jobs that time nothing do.

from d2lrepro.multidevice import data_parallel

# Each experiment's results directory, named once, as the Python side names it (core.paths).
DATA_PARALLEL = paths.experiment("multidevice", "data_parallel")
COST_MODEL = paths.experiment("multidevice", "cost_model")
PARAMETER_SERVER = paths.experiment("multidevice", "parameter_server")
ARCHITECTURES = paths.experiment("multidevice", "architectures")
SINGLE_PROCESS = paths.experiment("multidevice", "single_process")
# The history of one seed of a data-parallel run, as a wildcard pattern (core.paths.run_file).
DATA_PARALLEL_HISTORY = DATA_PARALLEL / paths.run_file("{run}", "{seed}")


# What the schema cannot say about the runs: a bad one stops here, before any job.
data_parallel.check_runs(S["data_parallel"]["runs"])
# Every (run, seed) of the data-parallel runs, and the runs that log top-k accuracy (their
# first seed): the summary takes them from here, not from the files' names.
DATA_PARALLEL_RUNS = [
    [run, seed]
    for run in S["data_parallel"]["runs"]
    for seed in S["data_parallel"]["seeds"]
]
TOPK_RUNS = [
    run for run, spec in S["data_parallel"]["runs"].items() if spec.get("topk")
]
MULTIGPU_MODELS = sorted({run["model"] for run in S["data_parallel"]["runs"].values()})


# The nodes of each multi-device run that spans several, else None (no such resource): SLURM
# then allocates them with one task (a torchrun agent) per node, and the `mpi` resource tells
# the executor that the job starts its tasks itself (srun).
SPANNING_NODES = {
    name: run["nodes"] if run["nodes"] > 1 else None
    for name, run in S["data_parallel"]["runs"].items()
}


# The devices of each run (on each of its nodes).
RUN_DEVICES = lambda w: S["data_parallel"]["runs"][w.run]["devices"]
# Why a run cannot use its devices here, as the run is planned (run on one node only: one
# that spans several decides in its job). Its claims are about the algorithm (accuracy,
# identical replicas), so its workers may share the GPUs: on one GPU, 2 workers share it.
DATA_PARALLEL_SHORT = shortfall_of(
    lambda w: RUN_DEVICES(w) if S["data_parallel"]["runs"][w.run]["nodes"] == 1 else 1,
    share=True,
)
# A run's time is judged only in the speed-ups of 2 GPUs, each of its own, over 1: where
# they are not here (no GPU, one GPU), every run trains as jobs that time nothing do, with a
# core for each worker, beside other jobs (CPU cores do not stand in for the GPUs' timing).
DATA_PARALLEL_UNJUDGED = unjudged_time(
    shortfall_of(2, cuda=2), lambda w: S["data_parallel"]["runs"][w.run]["nodes"] == 1
)
DATA_PARALLEL_THREADS = when_short(
    DATA_PARALLEL_SHORT,
    1,
    lambda w: RUN_DEVICES(w) if DATA_PARALLEL_UNJUDGED(w) else timing_threads(w),
)


rule data_parallel_run:
    input:
        data=FASHION_MNIST_DATA,
        # the machine a job short of devices records, without starting torch
        environment=ENVIRONMENT,
        code=code("data_parallel_run"),
    output:
        history=DATA_PARALLEL_HISTORY,
        topk=DATA_PARALLEL / paths.run_file("{run}", "{seed}", "topk.csv"),
        machines=machines_of(DATA_PARALLEL_HISTORY),
    log:
        Path("logs", "data_parallel_run", paths.run_file("{run}", "{seed}", "log")),
    benchmark:
        Path(
            "benchmarks", "data_parallel_run", paths.run_file("{run}", "{seed}", "tsv")
        )
    wildcard_constraints:
        run="|".join(re.escape(r) for r in S["data_parallel"]["runs"]),
        seed=r"\d+",
    conda:
        ENV
    threads: DATA_PARALLEL_THREADS
    resources:
        **needs(
            8000,
            480,
            gpus=when_short(DATA_PARALLEL_SHORT, 0, RUN_DEVICES),
            shared=DATA_PARALLEL_UNJUDGED,
        ),
        **shortfall_resources(DATA_PARALLEL_SHORT),
        unjudged=DATA_PARALLEL_UNJUDGED,
        nodes=lambda w: SPANNING_NODES[w.run],
        tasks=lambda w: SPANNING_NODES[w.run],
        mpi=lambda w: "srun" if SPANNING_NODES[w.run] else None,
    params:
        ran_alone=TIMINGS_ALONE,
        run=lambda w: S["data_parallel"]["runs"][w.run],
        timeout=S["data_parallel"]["timeout"],
        topk_every=S["data_parallel"]["topk_every"],
        seed=lambda w: int(w.seed),
    script:
        "../scripts/data_parallel_run.py"


# Two workers that train nothing: the cost model of each step and the printed examples, in
# one launch (a torchrun start costs seconds).
COST_STEPS = list(S["cost_model"])
# Without 2 devices, the job makes only the printed example of one device: on one core and a
# share of a GPU, as jobs that time nothing do. The printed examples are about the code, so
# their 2 workers may share a GPU; the cost model times their steps, which needs 2 devices of
# their own: without them (one GPU), the 2 workers make the printed examples only, as jobs
# that time nothing do.
COST_MODEL_SHORT = shortfall_of(2, share=True)
COST_MODEL_UNJUDGED = unjudged_time(shortfall_of(2, cuda=2), lambda w: True)
COST_MODEL_THREADS = when_short(
    COST_MODEL_SHORT, 1, lambda w: 2 if COST_MODEL_UNJUDGED(w) else timing_threads(w)
)


rule cost_model:
    input:
        code=code("cost_model"),
    output:
        **{m: COST_MODEL / f"{m}.csv" for m in COST_STEPS},
        examples=COST_MODEL / "examples.csv",
        machines=COST_MODEL / "machines.json",
    log:
        "logs/cost_model.log",
    benchmark:
        "benchmarks/cost_model.tsv"
    conda:
        ENV
    threads: COST_MODEL_THREADS
    resources:
        **needs(
            8000,
            60,
            gpus=2,
            shared=lambda w: bool(COST_MODEL_SHORT(w) or COST_MODEL_UNJUDGED(w)),
        ),
        **shortfall_resources(COST_MODEL_SHORT),
        unjudged=COST_MODEL_UNJUDGED,
    params:
        ran_alone=TIMINGS_ALONE,
        costs=S["cost_model"],
        timeout=S["data_parallel"]["timeout"],
        seed=S["seed"],
    script:
        "../scripts/cost_model.py"


# Synchronizing a gradient by each parameter-server strategy, on 2 workers and on all the
# machine's devices (at most max_devices): every GPU the job may lock.
PARAMETER_SERVER_SHORT = shortfall_of(2)


rule parameter_server:
    input:
        environment=ENVIRONMENT,
        code=code("parameter_server"),
    output:
        metrics=PARAMETER_SERVER / "metrics.csv",
        machines=machines_of(PARAMETER_SERVER / "metrics.csv"),
    log:
        "logs/parameter_server.log",
    benchmark:
        "benchmarks/parameter_server.tsv"
    conda:
        ENV
    threads: when_short(PARAMETER_SERVER_SHORT, 1, timing_threads)
    resources:
        **needs(
            16000,
            30,
            gpus=when_short(
                PARAMETER_SERVER_SHORT, 0, S["parameter_server"]["max_devices"]
            ),
        ),
        **shortfall_resources(PARAMETER_SERVER_SHORT),
    params:
        ran_alone=TIMINGS_ALONE,
        spec=S["parameter_server"],
        timeout=S["data_parallel"]["timeout"],
    script:
        "../scripts/parameter_server.py"


# FLOPs per parameter byte of AlexNet, ResNet-18 and GoogLeNet: counted, not timed.
rule architectures:
    input:
        code=code("architectures"),
    output:
        metrics=ARCHITECTURES / "metrics.csv",
        machines=machines_of(ARCHITECTURES / "metrics.csv"),
    log:
        "logs/architectures.log",
    benchmark:
        "benchmarks/architectures.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **needs(2000, 10),
    script:
        "../scripts/architectures.py"


# The book's own code path: one process driving 1 and 2 GPUs (nn.parallel.scatter,
# nn.DataParallel), with the settings of the 1- and 2-device run of each model.
SINGLE_PROCESS_RUNS = [f"{m}.{d}" for m in MULTIGPU_MODELS for d in (1, 2)]
# No claim judges the 1-GPU runs' times without the 2-GPU runs: short of 2 GPUs, the job runs
# what one allows on one core and a share of a GPU, as jobs that time nothing do, and with no
# GPU it runs nothing, on one core.
SINGLE_PROCESS_SHORT = shortfall_of(2, cuda=2)
SINGLE_PROCESS_SHARES = lambda w: SINGLE_PROCESS_SHORT(w).get("gpus", 0) > 0


rule single_process:
    input:
        data=FASHION_MNIST_DATA,
        # the machine a job planned without a GPU records, without starting torch
        environment=ENVIRONMENT,
        code=code("single_process"),
    output:
        **{run: SINGLE_PROCESS / f"{run}.csv" for run in SINGLE_PROCESS_RUNS},
        machines=SINGLE_PROCESS / "machines.json",
    log:
        "logs/single_process.log",
    benchmark:
        "benchmarks/single_process.tsv"
    conda:
        ENV
    threads: when_short(SINGLE_PROCESS_SHORT, 1, timing_threads)
    resources:
        **needs(
            8000,
            240,
            gpus=when_short(SINGLE_PROCESS_SHORT, 0, 2),
            shared=SINGLE_PROCESS_SHARES,
        ),
        **shortfall_resources(SINGLE_PROCESS_SHORT),
    params:
        ran_alone=TIMINGS_ALONE,
        runs={run: S["data_parallel"]["runs"][run] for run in SINGLE_PROCESS_RUNS},
        seed=S["seed"],
    script:
        "../scripts/single_process.py"


rule single_process_summary:
    input:
        runs=expand(SINGLE_PROCESS / "{run}.csv", run=SINGLE_PROCESS_RUNS),
        machines=rules.single_process.output.machines,
        book_curves="workflow/reference/book_curves.csv",
        code=code("single_process_summary"),
    output:
        metrics=SINGLE_PROCESS / "metrics.csv",
        machines=machines_of(SINGLE_PROCESS / "metrics.csv"),
    log:
        "logs/single_process_summary.log",
    benchmark:
        "benchmarks/single_process_summary.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **needs(2000, 10),
    script:
        "../scripts/single_process_summary.py"


# Each experiment's summary: its metrics.csv in its results directory, and its figures.
rule data_parallel_summary:
    input:
        runs=[DATA_PARALLEL / paths.run_file(r, s) for r, s in DATA_PARALLEL_RUNS],
        # The book's one-process runs of the same settings, drawn beside these.
        single_process=rules.single_process_summary.input.runs,
        # The top-k logs of the first seed: the seeds draw one run.
        topk=[
            DATA_PARALLEL
            / paths.run_file(run, S["data_parallel"]["seeds"][0], "topk.csv")
            for run in TOPK_RUNS
        ],
        machines=[
            *[
                machines_of(DATA_PARALLEL / paths.run_file(r, s))
                for r, s in DATA_PARALLEL_RUNS
            ],
            rules.single_process.output.machines,
        ],
        book_curves="workflow/reference/book_curves.csv",
        code=code("data_parallel_summary"),
    output:
        metrics=DATA_PARALLEL / "metrics.csv",
        machines=machines_of(DATA_PARALLEL / "metrics.csv"),
        mgpu_test_acc=figure("mgpu", "test_acc"),
        mgpu_epochs=figure("mgpu", "epochs"),
        mgpuc_test_acc=figure("mgpuc", "test_acc"),
        mgpuc_epochs=figure("mgpuc", "epochs"),
        throughput=figure("mgpuc", "throughput"),
        topk=figure("mgpuc", "topk"),
    log:
        "logs/data_parallel_summary.log",
    benchmark:
        "benchmarks/data_parallel_summary.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **needs(2000, 10),
    params:
        # The settings the preset scaled: the figures state them.
        scaled=[
            [d.key, d.book, d.value]
            for d in SETTINGS.deviations
            if d.key.startswith("data_parallel.")
        ],
        # what each of the inputs runs and topk is, in their order
        runs=DATA_PARALLEL_RUNS,
        topk_runs=TOPK_RUNS,
    script:
        "../scripts/data_parallel_summary.py"


rule cost_model_summary:
    input:
        costs=expand(COST_MODEL / "{step}.csv", step=COST_STEPS),
        examples=COST_MODEL / "examples.csv",
        machines=rules.cost_model.output.machines,
        code=code("cost_model_summary"),
    output:
        metrics=COST_MODEL / "metrics.csv",
        machines=machines_of(COST_MODEL / "metrics.csv"),
        figure=figure("mgpu", "cost_model"),
    log:
        "logs/cost_model_summary.log",
    benchmark:
        "benchmarks/cost_model_summary.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **needs(2000, 10),
    script:
        "../scripts/cost_model_summary.py"


rule parameter_server_summary:
    input:
        metrics=rules.parameter_server.output.metrics,
        machines=rules.parameter_server.output.machines,
        code=code("parameter_server_summary"),
    output:
        figure=figure("ps", "strategies"),
    log:
        "logs/parameter_server_summary.log",
    benchmark:
        "benchmarks/parameter_server_summary.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **needs(2000, 10),
    script:
        "../scripts/parameter_server_summary.py"


TIMED |= {
    f"data_parallel.runs.{run}": expand(
        DATA_PARALLEL_HISTORY,
        run=[run],
        seed=S["data_parallel"]["seeds"],
    )
    for run in S["data_parallel"]["runs"]
}
CURVES += [
    *rules.data_parallel_summary.input.runs,
    *rules.data_parallel_summary.input.topk,
    *rules.single_process_summary.input.runs,
    *rules.cost_model_summary.input.costs,
    rules.cost_model_summary.input.examples,
    rules.parameter_server_summary.input.metrics,
]

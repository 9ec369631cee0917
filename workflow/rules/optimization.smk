# The optimization chapter: intro figures, 2-D traces, weight curves, airfoil sweeps,
# learning-rate schedules.
from d2lrepro.optimization import schedulers

# Each experiment's results directory, named once, as the Python side names it (core.paths).
INTRO = paths.experiment("optimization", "intro")
TRACES = paths.experiment("optimization", "traces")
WEIGHTS = paths.experiment("optimization", "weights")
AIRFOIL = paths.experiment("optimization", "airfoil")
ADAM_EPS = paths.experiment("optimization", "adam_eps")
LR_SCHEDULES = paths.experiment("optimization", "lr_schedules")
WARMUP_SWEEP = paths.experiment("optimization", "warmup_sweep")

LR_RUNS = list(schedulers.RUNS)
# The schedule plots' rows, which the summary writes into the experiment's metrics.csv.
LR_SCHEDULE_PLOTS = LR_SCHEDULES / "schedule_plots.csv"


# An lr-schedule run's name in its files: the schedule and the semantics it ran under; the
# history of one of its seeds, as a wildcard pattern (core.paths.run_file).
LR_RUN = "{run}.{semantics}"
LR_RUN_HISTORY = LR_SCHEDULES / "runs" / paths.run_file(LR_RUN, "{seed}")
# Every (run, semantics, seed) of the lr schedules; a constant lr has no schedule to apply late.
LR_RUN_FILES = [
    LR_SCHEDULES / "runs" / paths.run_file(LR_RUN.format(run=r, semantics=s), seed)
    for r, s in [("constant", "as_written")]
    + [(r, s) for r in LR_RUNS[1:] for s in S["lr_schedules"]["semantics"]]
    for seed in S["lr_schedules"]["seeds"]
]
WARMUP_VARIANTS = ["none", "linear"]
# One output per peak lr of the warm-up sweep and variant (all seeds in one job).
WARMUP_RUN_FILES = [
    WARMUP_SWEEP / "runs" / f"lr{lr}.{variant}.csv"
    for lr in S["warmup_sweep"]["lrs"]
    for variant in WARMUP_VARIANTS
]


AIRFOIL_SETTINGS = Paramspace(
    pd.DataFrame({"setting": list(S["airfoil"]["settings"])}), filename_params="*"
)


rule intro:
    input:
        code=code("intro"),
    output:
        metrics=INTRO / "metrics.csv",
        machines=machines_of(INTRO / "metrics.csv"),
        risk=figure("intro", "risk"),
        local_min=figure("intro", "local_min"),
        saddle_x3=figure("intro", "saddle_x3"),
        saddle_x2y2=figure("intro", "saddle_x2y2"),
        vanishing=figure("intro", "vanishing"),
    log:
        "logs/intro.log",
    benchmark:
        "benchmarks/intro.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **needs(2000, 10),
    params:
        step=S["intro"]["grid_step"],
    script:
        "../scripts/intro.py"


rule traces:
    input:
        code=code("traces"),
    output:
        **run_figures(S["traces"]["runs"]),
        steps=TRACES / "steps.csv",
        metrics=TRACES / "metrics.csv",
        machines=machines_of(TRACES / "metrics.csv"),
    log:
        "logs/traces.log",
    benchmark:
        "benchmarks/traces.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **needs(2000, 10),
    params:
        runs=S["traces"]["runs"],
        steps=S["traces"]["steps"],
        start=S["traces"]["start"],
    script:
        "../scripts/traces.py"


rule weights:
    input:
        code=code("weights"),
    output:
        metrics=WEIGHTS / "metrics.csv",
        machines=machines_of(WEIGHTS / "metrics.csv"),
        momentum_weights=figure("momentum", "eff_weight"),
        rmsprop_weights=figure("rmsprop", "weights"),
        scalar=figure("momentum", "scalar"),
    log:
        "logs/weights.log",
    benchmark:
        "benchmarks/weights.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **needs(2000, 10),
    params:
        weights=S["weights"],
    script:
        "../scripts/weights.py"


# Every setting of the sweep in one job, taking turns within each seed: the start-up is paid
# once, and the settings' times, which a claim compares, come from one machine and one
# stretch of time.
AIRFOIL_RUN_FILES = expand(
    AIRFOIL / "runs" / "{setting}.csv", setting=AIRFOIL_SETTINGS.instance_patterns
)
# Adagrad's step against SGD's, timed in the same job after the sweep.
AIRFOIL_STEP_COST = AIRFOIL / "step_cost.csv"


rule airfoil_run:
    input:
        data=AIRFOIL_DATA,
        code=code("airfoil_run"),
    output:
        runs=AIRFOIL_RUN_FILES,
        step_cost=AIRFOIL_STEP_COST,
        machines=[machines_of(path) for path in [*AIRFOIL_RUN_FILES, AIRFOIL_STEP_COST]],
    log:
        "logs/airfoil_run.log",
    benchmark:
        "benchmarks/airfoil_run.tsv"
    conda:
        ENV
    # Its training times are compared across settings: nothing runs beside it.
    threads: timing_threads
    resources:
        **needs(2000, 30),
    params:
        ran_alone=TIMINGS_ALONE,
        # in the order of the outputs
        settings=S["airfoil"]["settings"],
        seeds=S["airfoil"]["seeds"],
        epochs=S["airfoil"]["epochs"],
        batch_size=S["airfoil"]["batch_size"],
        eval_every=S["airfoil"]["eval_every"],
        step_cost=S["airfoil"]["step_cost"],
    script:
        "../scripts/airfoil_run.py"


# Scratch against torch.optim from one start, for each optimizer that has a torch setting: one
# job, since each comparison trains for under a second and a process takes longer to start.
COMPARED = {
    n: s for n, s in S["airfoil"]["settings"].items() if s["implementation"] == "torch"
}


rule airfoil_compare:
    input:
        data=AIRFOIL_DATA,
        code=code("airfoil_compare"),
    output:
        metrics=AIRFOIL / "compare.csv",
        machines=machines_of(AIRFOIL / "compare.csv"),
    log:
        "logs/airfoil_compare.log",
    benchmark:
        "benchmarks/airfoil_compare.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **needs(2000, 10),
    params:
        settings=COMPARED,
        epochs=S["airfoil"]["epochs"]["scratch"],
        batch_size=S["airfoil"]["batch_size"],
        eval_every=S["airfoil"]["eval_every"],
        seed=S["seed"],
        seeds=S["airfoil"]["seeds"],
        gap_at=S["airfoil"].get("gap_at", {}),
    script:
        "../scripts/airfoil_compare.py"


rule airfoil_summary:
    input:
        runs=rules.airfoil_run.output.runs,
        metric_files=[
            *([rules.airfoil_compare.output.metrics] if COMPARED else []),
            rules.airfoil_run.output.step_cost,
        ],
        machines=[
            *rules.airfoil_run.output.machines,
            *([rules.airfoil_compare.output.machines] if COMPARED else []),
        ],
        book_curves="workflow/reference/book_curves.csv",
        code=code("airfoil_summary"),
    output:
        **run_figures(S["airfoil"]["settings"]),
        runs=AIRFOIL / "losses.csv",
        metrics=AIRFOIL / "metrics.csv",
        machines=machines_of(AIRFOIL / "metrics.csv"),
    log:
        "logs/airfoil_summary.log",
    benchmark:
        "benchmarks/airfoil_summary.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **needs(2000, 10),
    script:
        "../scripts/airfoil_summary.py"


# Adam's ε inside or outside the square root: one job per ε of the sweep.
EPS = {f"{e:g}": e for e in S["airfoil"]["adam_eps"]["eps"]}


rule adam_eps_run:
    input:
        data=AIRFOIL_DATA,
        code=code("adam_eps_run"),
    output:
        runs=ADAM_EPS / "runs" / "eps{eps}.csv",
        machines=machines_of(ADAM_EPS / "runs" / "eps{eps}.csv"),
    log:
        "logs/adam_eps_run/eps{eps}.log",
    benchmark:
        "benchmarks/adam_eps_run/eps{eps}.tsv"
    wildcard_constraints:
        eps="|".join(re.escape(e) for e in EPS),
    conda:
        ENV
    threads: 1
    resources:
        **needs(2000, 10),
    params:
        eps=lambda w: EPS[w.eps],
        seeds=S["airfoil"]["adam_eps"]["seeds"],
        lrs=S["airfoil"]["adam_eps"]["lrs"],
        epochs=S["airfoil"]["epochs"]["scratch"],
        batch_size=S["airfoil"]["batch_size"],
        eval_every=S["airfoil"]["eval_every"],
    script:
        "../scripts/adam_eps_run.py"


rule adam_eps_summary:
    input:
        runs=expand(rules.adam_eps_run.output.runs, eps=EPS),
        machines=expand(rules.adam_eps_run.output.machines, eps=EPS),
        code=code("adam_eps_summary"),
    output:
        runs=ADAM_EPS / "finals.csv",
        metrics=ADAM_EPS / "metrics.csv",
        machines=machines_of(ADAM_EPS / "metrics.csv"),
        figure=figure("adam", "eps_outside"),
    log:
        "logs/adam_eps_summary.log",
    benchmark:
        "benchmarks/adam_eps_summary.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **needs(2000, 10),
    script:
        "../scripts/adam_eps_summary.py"


rule lr_schedules_plot:
    input:
        code=code("lr_schedules_plot"),
    output:
        metrics=LR_SCHEDULE_PLOTS,
        machines=machines_of(LR_SCHEDULE_PLOTS),
        sqrt=figure("lrs", "sqrt_plot"),
        factor=figure("lrs", "factor_plot"),
        multistep=figure("lrs", "multifactor_plot"),
        cosine=figure("lrs", "cosine_plot"),
        warmup=figure("lrs", "warmup_plot"),
    log:
        "logs/lr_schedules_plot.log",
    benchmark:
        "benchmarks/lr_schedules_plot.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **needs(2000, 10),
    script:
        "../scripts/lr_schedules_plot.py"


rule lr_schedules_run:
    input:
        data=FASHION_MNIST_DATA,
        code=code("lr_schedules_run"),
    output:
        history=LR_RUN_HISTORY,
        machines=machines_of(LR_RUN_HISTORY),
    log:
        Path("logs", "lr_schedules_run", paths.run_file(LR_RUN, "{seed}", "log")),
    benchmark:
        Path("benchmarks", "lr_schedules_run", paths.run_file(LR_RUN, "{seed}", "tsv"))
    wildcard_constraints:
        run="|".join(LR_RUNS),
        semantics="|".join(schedulers.SEMANTICS),
        seed=r"\d+",
    conda:
        ENV
    # A small LeNet that times nothing a verdict depends on: it shares its GPU (jobs_per_gpu).
    threads: 1
    resources:
        **needs(4000, 240, shared=True),
    params:
        epochs=S["lr_schedules"]["epochs"],
        batch_size=S["lr_schedules"]["batch_size"],
        train_subset=S["lr_schedules"]["train_subset"],
        test_subset=S["lr_schedules"]["test_subset"],
        seed=lambda w: int(w.seed),
    script:
        "../scripts/lr_schedules_run.py"


rule warmup_sweep:
    input:
        data=FASHION_MNIST_DATA,
        code=code("warmup_sweep"),
    output:
        runs=WARMUP_SWEEP / "runs" / "lr{lr}.{warmup}.csv",
        machines=machines_of(WARMUP_SWEEP / "runs" / "lr{lr}.{warmup}.csv"),
    log:
        "logs/warmup_sweep/lr{lr}.{warmup}.log",
    benchmark:
        "benchmarks/warmup_sweep/lr{lr}.{warmup}.tsv"
    wildcard_constraints:
        lr=r"\d+(\.\d+)?",
        warmup="|".join(WARMUP_VARIANTS),
    conda:
        ENV
    # As lr_schedules_run: it shares its GPU.
    threads: 1
    resources:
        **needs(4000, 60, shared=True),
    params:
        sweep=S["warmup_sweep"],
        lr=lambda w: float(w.lr),
    script:
        "../scripts/warmup_sweep.py"


rule lr_schedules_summary:
    input:
        runs=LR_RUN_FILES,
        plots=LR_SCHEDULE_PLOTS,
        machines=[machines_of(f) for f in [*LR_RUN_FILES, LR_SCHEDULE_PLOTS]],
        book_curves="workflow/reference/book_curves.csv",
        code=code("lr_schedules_summary"),
    output:
        history=LR_SCHEDULES / "history.csv",
        metrics=LR_SCHEDULES / "metrics.csv",
        machines=machines_of(LR_SCHEDULES / "metrics.csv"),
        lrs=figure("lrs", "epoch_lrs"),
        early=figure("lrs", "warmup_early"),
        constant=figure("lrs", "baseline"),
        sqrt=figure("lrs", "sqrt_train"),
        multistep=figure("lrs", "multifactor_train"),
        cosine=figure("lrs", "cosine_train"),
        warmup=figure("lrs", "warmup_train"),
    log:
        "logs/lr_schedules_summary.log",
    benchmark:
        "benchmarks/lr_schedules_summary.tsv"
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
            if d.key.startswith("lr_schedules.")
        ],
    script:
        "../scripts/lr_schedules_summary.py"


rule warmup_sweep_summary:
    input:
        runs=WARMUP_RUN_FILES,
        machines=[machines_of(run) for run in WARMUP_RUN_FILES],
        code=code("warmup_sweep_summary"),
    output:
        metrics=WARMUP_SWEEP / "metrics.csv",
        machines=machines_of(WARMUP_SWEEP / "metrics.csv"),
        figure=figure("lrs", "warmup_sweep"),
    log:
        "logs/warmup_sweep_summary.log",
    benchmark:
        "benchmarks/warmup_sweep_summary.tsv"
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
            if d.key.startswith("warmup_sweep.")
        ],
    script:
        "../scripts/warmup_sweep_summary.py"


TIMED |= {
    "lr_schedules": [str(p) for p in LR_RUN_FILES],
    "warmup_sweep": [str(p) for p in WARMUP_RUN_FILES],
}
CURVES += [
    rules.traces.output.steps,
    rules.airfoil_summary.output.runs,
    rules.adam_eps_summary.output.runs,
    rules.lr_schedules_summary.output.history,
    *rules.warmup_sweep_summary.input.runs,
]

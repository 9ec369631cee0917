# Training on 1 and 2 devices: each run is launched with torchrun by its script, takes all
# cores (so that its timing is its own) and is not applicable, not failed, where the machine
# lacks the devices.


rule multidevice_train:
    input:
        data="results/data/fashion_mnist.pt",
        code=code("multidevice_train"),
    output:
        history="results/multidevice/{run}.seed{seed}.csv",
        topk="results/multidevice/{run}.seed{seed}.topk.csv",
    log:
        "logs/multidevice_train/{run}.seed{seed}.log",
    benchmark:
        "benchmarks/multidevice_train/{run}.seed{seed}.tsv"
    wildcard_constraints:
        run="|".join(re.escape(r) for r in S["multidevice"]["runs"]),
        seed=r"\d+",
    conda:
        ENV
    threads: all_cores
    resources:
        **needs(8000, 480, gpus=run_devices),
        nodes=spanning_nodes,
        tasks=spanning_nodes,
        mpi=lambda w: "srun" if spanning_nodes(w) else None,
    params:
        run=lambda w: S["multidevice"]["runs"][w.run],
        timeout=S["multidevice"]["timeout"],
        topk_every=S["multidevice"]["topk_every"],
        seed=lambda w: int(w.seed),
    script:
        "../scripts/multidevice_train.py"


# Two workers that train nothing: the cost model of each step and the printed examples, in
# one launch (a torchrun start costs seconds).
COST_STEPS = list(S["multidevice"]["cost_model"])


rule multidevice_probes:
    input:
        code=code("multidevice_probes"),
    output:
        **{m: f"results/multidevice/cost_{m}.csv" for m in COST_STEPS},
        examples="results/multidevice/examples.csv",
    log:
        "logs/multidevice_probes.log",
    benchmark:
        "benchmarks/multidevice_probes.tsv"
    conda:
        ENV
    threads: all_cores
    resources:
        **needs(8000, 60, gpus=2),
    params:
        costs=S["multidevice"]["cost_model"],
        timeout=S["multidevice"]["timeout"],
        seed=S["seed"],
    script:
        "../scripts/multidevice_probes.py"


# Synchronizing a gradient by each parameter-server strategy, on 2 workers and on all the
# machine's devices (at most max_devices): every GPU the job may claim.
rule parameter_server:
    input:
        code=code("parameter_server"),
    output:
        "results/multidevice/param_server.csv",
    log:
        "logs/parameter_server.log",
    benchmark:
        "benchmarks/parameter_server.tsv"
    conda:
        ENV
    threads: all_cores
    resources:
        **needs(16000, 30, gpus=S["parameter_server"]["max_devices"]),
    params:
        spec=S["parameter_server"],
        timeout=S["multidevice"]["timeout"],
    script:
        "../scripts/parameter_server.py"


# FLOPs per parameter byte of AlexNet, ResNet-18 and GoogLeNet: counted, not timed.
rule architectures:
    input:
        code=code("architectures"),
    output:
        "results/multidevice/architectures.csv",
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
BOOK_RUNS = [f"{m}.{d}" for m in MULTIGPU_MODELS for d in (1, 2)]


rule book_multigpu:
    input:
        data="results/data/fashion_mnist.pt",
        code=code("book_multigpu"),
    output:
        **{run: f"results/multidevice/book_{run}.csv" for run in BOOK_RUNS},
    log:
        "logs/book_multigpu.log",
    benchmark:
        "benchmarks/book_multigpu.tsv"
    conda:
        ENV
    threads: all_cores
    resources:
        **needs(8000, 240, gpus=2),
    params:
        runs={run: S["multidevice"]["runs"][run] for run in BOOK_RUNS},
        seed=S["seed"],
    script:
        "../scripts/book_multigpu.py"


rule multidevice_summary:
    input:
        runs=expand(
            "results/multidevice/{run}.seed{seed}.csv",
            run=S["multidevice"]["runs"],
            seed=S["multidevice"]["seeds"],
        ),
        book=expand("results/multidevice/book_{run}.csv", run=BOOK_RUNS),
        # The top-k logs of the first seed: the seeds draw one run.
        topk=[
            f"results/multidevice/{run}.seed{S['multidevice']['seeds'][0]}.topk.csv"
            for run, spec in S["multidevice"]["runs"].items()
            if spec.get("topk")
        ],
        costs=expand("results/multidevice/cost_{step}.csv", step=COST_STEPS),
        examples="results/multidevice/examples.csv",
        param_server="results/multidevice/param_server.csv",
        book_curves="workflow/reference/book_curves.csv",
        environment="results/environment.json",
        code=code("multidevice_summary"),
    output:
        metrics="results/multidevice/metrics.csv",
        mgpu_test_acc=figure("mgpu", "test_acc"),
        mgpu_epochs=figure("mgpu", "epochs"),
        cost=figure("mgpu", "cost_model"),
        mgpuc_test_acc=figure("mgpuc", "test_acc"),
        mgpuc_epochs=figure("mgpuc", "epochs"),
        throughput=figure("mgpuc", "throughput"),
        topk=figure("mgpuc", "topk"),
        ps=figure("ps", "strategies"),
    log:
        "logs/multidevice_summary.log",
    benchmark:
        "benchmarks/multidevice_summary.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **needs(2000, 10),
    script:
        "../scripts/multidevice_summary.py"

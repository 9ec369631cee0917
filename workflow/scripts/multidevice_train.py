from d2lrepro import logs, multigpu_launch

logs.setup(snakemake.log[0])
multigpu_launch.launch_training(
    snakemake.wildcards.run,
    snakemake.params.run,
    snakemake.params.seed,
    data=snakemake.input.data,
    history=snakemake.output.history,
    topk=snakemake.output.topk,
    topk_every=snakemake.params.topk_every,
    timeout=snakemake.params.timeout,
    log_path=snakemake.log[0],
)

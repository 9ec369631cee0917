from d2lrepro import logs, multigpu_launch

logs.setup(snakemake.log[0])
multigpu_launch.launch_probes(
    snakemake.params.costs,
    {model: snakemake.output[model] for model in snakemake.params.costs},
    snakemake.output.examples,
    snakemake.params.param_server,
    snakemake.output.param_server,
    snakemake.params.seed,
    snakemake.params.timeout,
    snakemake.log[0],
)

from d2lrepro import logs, multigpu_book

logs.setup(snakemake.log[0])
multigpu_book.run_book(
    snakemake.wildcards.model,
    snakemake.params.run,
    snakemake.params.seed,
    snakemake.input.data,
    snakemake.output[0],
)

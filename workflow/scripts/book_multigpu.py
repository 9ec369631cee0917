from d2lrepro import logs, multigpu_book

logs.setup(snakemake.log[0])
multigpu_book.run_book(
    snakemake.params.runs,
    snakemake.params.seed,
    snakemake.input.data,
    {name: snakemake.output[name] for name in snakemake.params.runs},
)

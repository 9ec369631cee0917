from d2lrepro.core import machines, reference
from d2lrepro.multidevice import summary
from d2lrepro.pipeline import job

job.start(snakemake)
summary.summarize(
    runs=snakemake.input.runs,
    single_process=snakemake.input.single_process,
    costs=snakemake.input.costs,
    topk=snakemake.input.topk,
    examples=snakemake.input.examples,
    servers=snakemake.input.param_server,
    records=machines.read(snakemake.input.machines),
    metrics_out=snakemake.output.metrics,
    figure_paths=snakemake.output,
    book=reference.load(snakemake.input.book_curves),
)

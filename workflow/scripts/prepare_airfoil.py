from d2lrepro.core import data, logs, results

log = logs.setup(snakemake.log[0])
tensors = data.prepare_airfoil(snakemake.input.table, n=snakemake.params.examples)
log.info("features %s, labels %s", tuple(tensors["features"].shape), tuple(tensors["labels"].shape))
data.save(tensors, snakemake.output.tensors)
results.write_metrics(data.airfoil_facts(snakemake.input.table, tensors), snakemake.output.metrics)

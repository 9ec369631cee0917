from d2lrepro import data, logs

log = logs.setup(snakemake.log[0])
tensors = data.prepare_fashion_mnist(**snakemake.input)
for name, tensor in tensors.items():
    log.info("%s: %s %s", name, tuple(tensor.shape), tensor.dtype)
data.save(tensors, snakemake.output[0])

from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.core import data
from d2lrepro.pipeline import job

log = job.start(snakemake)
files = snakemake.input
tensors = data.prepare_fashion_mnist(
    files.train_images, files.train_labels, files.test_images, files.test_labels
)
for name, tensor in tensors.items():
    log.info("%s: %s %s", name, tuple(tensor.shape), tensor.dtype)
data.save(tensors, snakemake.output[0])

from d2lrepro.pipeline import job_server

job_server.hand_over(snakemake)

from d2lrepro.core import fetch
from d2lrepro.pipeline import job

job.start(snakemake)
spec = next(s for s in fetch.FILES.values() if s.mirror_path == snakemake.wildcards.path)
fetch.fetch(spec, snakemake.output[0], fetch.mirrors(snakemake.config.get("data_mirror")))

from d2lrepro.core import fetch, logs

logs.setup(snakemake.log[0])
spec = next(s for s in fetch.FILES.values() if s.mirror_path == snakemake.wildcards.path)
fetch.fetch(spec, snakemake.output[0], fetch.mirrors(snakemake.config.get("data_mirror")))

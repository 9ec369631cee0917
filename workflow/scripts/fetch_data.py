from d2lrepro import data, logs

logs.setup(snakemake.log[0])
spec = next(s for s in data.FILES.values() if s.mirror_path == snakemake.wildcards.path)
data.fetch(spec, snakemake.output[0], data.mirrors(snakemake.config.get("data_mirror")))

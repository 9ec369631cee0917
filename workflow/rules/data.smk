# The chapter's results directory, and the data sets it prepares for the other chapters.
DATA = paths.RESULTS / "data"
FASHION_MNIST_DATA = DATA / "fashion_mnist.pt"
AIRFOIL_DATA = DATA / "airfoil.pt"

DATA_FILES = {spec.mirror_path: spec for spec in fetch.FILES.values()}


# The mirror is read from the config inside the script, not through params: where a
# checksum-verified file came from must not make everything downstream rerun.
rule fetch_data:
    input:
        code=code("fetch_data"),
    output:
        "resources/{path}",
    log:
        "logs/fetch_data/{path}.log",
    wildcard_constraints:
        path="|".join(re.escape(p) for p in DATA_FILES),
    localrule: True
    conda:
        ENV
    threads: 1
    resources:
        **needs(1000, 10),
    script:
        "../scripts/fetch_data.py"


rule prepare_fashion_mnist:
    input:
        train_images="resources/fashion-mnist/train-images-idx3-ubyte.gz",
        train_labels="resources/fashion-mnist/train-labels-idx1-ubyte.gz",
        test_images="resources/fashion-mnist/t10k-images-idx3-ubyte.gz",
        test_labels="resources/fashion-mnist/t10k-labels-idx1-ubyte.gz",
        code=code("prepare_fashion_mnist"),
    output:
        FASHION_MNIST_DATA,
    log:
        "logs/prepare_fashion_mnist.log",
    benchmark:
        "benchmarks/prepare_fashion_mnist.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **needs(2000, 10),
    script:
        "../scripts/prepare_fashion_mnist.py"


rule prepare_airfoil:
    input:
        table="resources/airfoil/airfoil_self_noise.dat",
        code=code("prepare_airfoil"),
    output:
        tensors=AIRFOIL_DATA,
    log:
        "logs/prepare_airfoil.log",
    benchmark:
        "benchmarks/prepare_airfoil.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **needs(1000, 10),
    params:
        examples=S["airfoil"]["examples"],
    script:
        "../scripts/prepare_airfoil.py"

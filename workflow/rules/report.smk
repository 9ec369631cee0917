rule describe_environment:
    input:
        code=code("describe_environment"),
    output:
        ENVIRONMENT,
    log:
        "logs/describe_environment.log",
    conda:
        ENV
    threads: 1
    resources:
        **needs(1000, 10),
    script:
        "../scripts/describe_environment.py"


rule evaluate_claims:
    input:
        ledger="workflow/claims.yaml",
        evidence=claims.evidence_files(LEDGER),
        machines=[machines_of(path) for path in claims.evidence_files(LEDGER)],
        # The histories of the runs of each setting a preset scales (params.timed): a scaled
        # claim says how long training at the book's scale would take here, at their rates.
        histories=[path for paths in TIMED.values() for path in paths],
        code=code("evaluate_claims"),
    output:
        report(
            paths.CLAIMS,
            caption="../../report/captions/claims.rst",
            category="0. Claims",
        ),
    log:
        "logs/evaluate_claims.log",
    localrule: True
    conda:
        ENV
    threads: 1
    resources:
        **needs(2000, 10),
    params:
        preset=SETTINGS.preset,
        deviations=[[d.key, d.book, d.value] for d in SETTINGS.deviations],
        overridden=sorted(SETTINGS.overridden),
        timed=TIMED,
    script:
        "../scripts/evaluate_claims.py"


rule report:
    input:
        ledger="workflow/claims.yaml",
        claims=paths.CLAIMS,
        environment=ENVIRONMENT,
        machines=rules.evaluate_claims.input.machines,
        template="report/report.html.j2",
        section_template="report/section.html.j2",
        # the measured times of the presets: what would judge the claims not judged here
        timings="docs/timings.md",
        code=code("report"),
        figures=claims.figure_files(LEDGER),
    output:
        html=report(
            paths.REPORT,
            caption="../../report/captions/report.rst",
            category="0. Claims",
        ),
        tables=[claims_table(section) for section in SECTION_TITLES],
        markdown=paths.CLAIMS_MARKDOWN,
    log:
        "logs/report.log",
    localrule: True
    conda:
        ENV
    threads: 1
    resources:
        **needs(2000, 10),
    params:
        requested=SETTINGS.requested,
        preset=SETTINGS.preset,
        deviations=[[d.key, d.book, d.value] for d in SETTINGS.deviations],
        overridden=sorted(SETTINGS.overridden),
    script:
        "../scripts/report.py"


rule archive:
    input:
        ledger="workflow/claims.yaml",
        claims=paths.CLAIMS,
        environment=ENVIRONMENT,
        evidence=claims.evidence_files(LEDGER),
        machines=rules.evaluate_claims.input.machines,
        curves=CURVES,
        code=code("archive"),
    output:
        ARCHIVE,
    log:
        "logs/archive.log",
    localrule: True
    conda:
        ENV
    threads: 1
    resources:
        **needs(1000, 10),
    params:
        requested=SETTINGS.requested,
        preset=SETTINGS.preset,
        deviations=[[d.key, d.book, d.value] for d in SETTINGS.deviations],
        overridden=sorted(SETTINGS.overridden),
    script:
        "../scripts/archive.py"


# Not part of `all`: snakemake --cores all compare --config compare_with='[a.zip, b.zip]'
rule compare:
    input:
        runs=compared,
        book_curves="workflow/reference/book_curves.csv",
        # what each section declares the comparison draws (compared_curves)
        ledger="workflow/claims.yaml",
        template="report/compare.html.j2",
        # and the modules the ledger names, which it imports by name
        code=code("compare")
        + code_inputs.module_files(
            code_inputs.ledger_modules(LEDGER), workflow.basedir
        ),
    output:
        html=paths.COMPARE / "compare.html",
        table=paths.COMPARE / "compare.csv",
    log:
        "logs/compare.log",
    localrule: True
    conda:
        ENV
    threads: 1
    resources:
        **needs(2000, 10),
    script:
        "../scripts/compare.py"

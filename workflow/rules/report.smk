rule describe_environment:
    output:
        "results/environment.json",
    log:
        "logs/describe_environment.log",
    localrule: True
    script:
        "../scripts/describe_environment.py"


rule evaluate_claims:
    input:
        ledger="workflow/claims.yaml",
        environment="results/environment.json",
        evidence=claims.evidence_files(LEDGER),
    output:
        report(
            "results/claims.csv",
            caption="../../report/captions/claims.rst",
            category="0. Claims",
        ),
    log:
        "logs/evaluate_claims.log",
    localrule: True
    script:
        "../scripts/evaluate_claims.py"


rule report:
    input:
        ledger="workflow/claims.yaml",
        claims="results/claims.csv",
        environment="results/environment.json",
        template="report/report.html.j2",
        figures=claims.figure_files(LEDGER),
    output:
        report(
            "results/report.html",
            caption="../../report/captions/report.rst",
            category="0. Claims",
        ),
    params:
        requested=SETTINGS.requested,
        preset=SETTINGS.preset,
        deviations=[[d.key, d.book, d.value] for d in SETTINGS.deviations],
    log:
        "logs/report.log",
    localrule: True
    script:
        "../scripts/report.py"

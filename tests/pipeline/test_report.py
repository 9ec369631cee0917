import copy
import re
import tomllib

import pandas as pd

from d2lrepro.core import paths, plotting, results
from d2lrepro.pipeline import checks, claims, report, settings

ENV = {
    "cpu_model": "Test CPU",
    "logical_cpus": 2,
    "usable_cores": 2,
    "torch_version": "2.13.0",
    "python_version": "3.11",
    "platform": "linux",
    "cuda_available": False,
    "cuda_version": None,
    "cuda_devices": 0,
    "gpus": [],
}


SOURCES = {
    "book": {
        "label": "the book",
        "title": "Dive into Deep Learning",
        "kind": "book",
        "about": "English and Chinese editions",
        "url": "https://d2l.ai/",
    },
    "notes": {
        "label": "the study notes",
        "title": "6 优化算法和计算性能 (Optimization)",
        "kind": "notes",
        "about": "A reader's <notes>",
        "path": "shared/seeds/000.txt",
    },
}
LEDGER = {
    "chapters": {
        "c": {"title": "A chapter", "covers": "§12.7", "leaves_out": ["§12.2 Convexity: no notes"]}
    },
    "sources": SOURCES,
    "sections": [
        {
            "id": "s",
            "title": "Section <one>",
            "chapter": "c",
            "sources": [
                {"id": "notes", "at": "§6.2.2 AdaGrad算法"},
                {"id": "book", "at": "§12.7 Adagrad", "page": "chapter_optimization/adagrad"},
            ],
            "figures": [{"name": "c", "caption": "A line"}],
            "claims": [{"id": "s.c", "claimed_by": "notes", "evidence": "m.csv"}],
        },
        {
            "id": "t",
            "title": "No figure",
            "chapter": "c",
            "sources": [{"id": "book", "at": "§13.2"}],
            "claims": [
                {"id": i, "claimed_by": "book", "evidence": "m.csv"} for i in ("t.d", "t.0", "t.1")
            ],
        },
    ],
}
ROW = {
    "id": "s.c",
    "kind": "measurement",
    "section": "s",
    "headline": "Holds well",
    "statement": "It holds",
    "printed": "the study notes: 比线性慢一些",
    "printed_en": "somewhat slower than linearly",
    "measured": "acc = 0.85",
    "verdict": claims.NOT_REPRODUCED,
    "reason": "failed: acc",
    "device": "cpu",
    "evidence": "m.csv",
}
TABLE = pd.DataFrame(
    [
        ROW,
        ROW
        | {
            "id": "t.d",
            "section": "t",
            "statement": "Runs <async>",
            "printed": "0.84",
            "printed_en": "",
            "verdict": claims.REPRODUCED,
            "reason": "",
        },
    ],
    columns=claims.COLUMNS,
)


def test_report_is_self_contained_and_shows_book_beside_measured(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the figure lies where its section and name put it
    fig, ax = plotting.figure()
    plotting.plot_lines(ax, [0, 1], [[0, 1]], "x (s)", "y (s)")
    plotting.save(fig, paths.figure("s", "c"), footer="Test CPU")
    run = settings.Settings("auto", "smoke", {}, [settings.Deviation("train.epochs", 10, 1)])
    html = report.render(LEDGER, TABLE, ENV, run, commit="abc123")
    assert "Section &lt;one&gt;" in html  # escaped
    assert "data:image/png;base64," in html and 'src="/' not in html
    for text in (
        "It holds",
        "比线性慢一些",
        "<b>English:</b> somewhat slower than linearly",  # the gloss beside the quotation
        "acc = 0.85",
        "not reproduced",
        "failed: acc",
        "smoke",
        "train.epochs",
        "Test CPU",
        "abc123",
        "1 not reproduced: 1 measurement, 0 printed outputs",
        "1 reproduced: 1 measurement, 0 printed outputs",
        '<span class="kind">measurements</span>',  # the contents count the kinds apart
        '<div class="reason">measurement, claimed by the study notes</div>',
        "What this run found",
        "This run judged 2 of the chapter&#39;s 2 claims: 1 held (1 measurement) and 1 did not."
        " Of the book&#39;s own claims, 1 held and 0 did not; of the others (the study notes),"
        " 0 held and 1 did not.",
        # the failure: whose claim, what its source printed (in English), what this run
        # measured and where
        '<span class="whose">claimed by the study notes</span>: printed somewhat slower than'
        ' linearly; measured here <span class="mono">acc</span> (on cpu).',
        "<summary>Holds well</summary>",  # the headline, the statement a click away
        'href="#claim-s.c"',
        '<figure id="fig-s-c">',
        'href="#fig-s-c"',  # the claim s.c links to the figure named after it
        # each source by its title, what it is and where: no file number
        '<a href="https://d2l.ai/chapter_optimization/adagrad.html">Dive into Deep Learning</a>'
        ", §12.7 Adagrad",
        "the study notes</a>: 6 优化算法和计算性能 (Optimization), §6.2.2 AdaGrad算法",
        "A reader&#39;s &lt;notes&gt;",
    ):
        assert text in html, text
    assert "<b>English:</b> </div>" not in html  # no gloss where the book printed no Chinese


def test_an_inconclusive_claim_has_its_own_colour_count_and_words(tmp_path, monkeypatch):
    """A claim whose bound lay within its spread is counted apart at the top, in the contents
    and in the findings, in a colour of its own, never as not reproduced; the findings show
    its spread's two ends in plain words, the glossary explains the words they leave out; a
    long metric name wraps in its cell."""
    monkeypatch.chdir(tmp_path)
    fig, ax = plotting.figure()
    plotting.plot_lines(ax, [0, 1], [[0, 1]], "x (s)", "y (s)")
    plotting.save(fig, paths.figure("s", "c"), footer="Test CPU")
    check = "lenet.1.test_acc = 0.8094, spread 0.7994 to 0.8194 (needs > 0.815)"
    measured = f"{check}, {checks.WITHIN_NOISE}"
    unsure = {"verdict": claims.INCONCLUSIVE, "measured": measured, "reason": measured}
    table = TABLE.assign(**{k: [v, TABLE.loc[1, k]] for k, v in unsure.items()})
    run = settings.Settings("auto", "smoke", {}, [])
    html = report.render(LEDGER, table, ENV, run, commit="abc123")
    for text in (
        ".unsure {",
        "overflow-wrap: anywhere",  # in the cells' rule
        '<span class="unsure">1 inconclusive here: 1 measurement, 0 printed outputs</span>',
        '<span class="n unsure" title="1 measurement: inconclusive here">1</span>',
        '<td class="verdict"><span class="unsure">inconclusive here</span></td>',
        "1 held (1 measurement), 0 did not and 1 was inconclusive",
        f'<span class="mono">{check.replace(">", "&gt;")}</span> (on cpu);',  # escaped; where
        "<b>IQR</b> (interquartile range",
        "<b>sign test</b>",
    ):
        assert text in html, text
    assert "0 not reproduced" in html
    assert "th, td {" in html and "overflow-wrap: anywhere" in html.split("th, td {")[1][:200]
    found = html.split('<section id="found">')[1].split("</section>")[0]
    assert "IQR" not in found and "pessimistic" not in found
    page = report.section_pages(LEDGER, table)["s"]
    assert '<span class="unsure">inconclusive here</span>' in page and ".unsure {" in page


def test_the_glossary_names_every_unit_a_number_is_shown_in(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fig, ax = plotting.figure()
    plotting.save(fig, paths.figure("s", "c"), footer="Test CPU")
    html = report.render(LEDGER, TABLE, ENV, settings.Settings("auto", "smoke", {}, []), "abc")
    units = html.split("<dt>units</dt>")[1].split("</dd>")[0]
    for unit in set(results.UNITS) - results.UNSHOWN:
        assert re.search(rf"(^|[ ,>]){re.escape(unit)}[:,]", units), unit


def test_a_section_without_figures_has_a_page_of_its_claims():
    """`snakemake --report` shows a section through its files: each has a page of its claims,
    the one file of a section without figures."""
    pages = report.section_pages(LEDGER, TABLE)
    assert list(pages) == ["s", "t"]
    assert "<h2>02. No figure</h2>" in pages["t"]
    assert "Runs &lt;async&gt;" in pages["t"] and "It holds" not in pages["t"]
    assert '<span class="ok">reproduced</span>' in pages["t"]
    assert '<a href="https://d2l.ai/">Dive into Deep Learning</a>, §13.2' in pages["t"]
    assert "<b>English:</b> somewhat slower than linearly" in pages["s"]
    assert "<h2>01. Section &lt;one&gt;</h2>" in pages["s"]


def test_a_claim_links_to_the_figure_named_after_it_or_its_prefix():
    names = ["warmup_train", "warmup"]
    assert report.claim_figure("lrs.warmup_train.intended", "lrs", names) == "warmup_train"
    assert report.claim_figure("lrs.warmup.book", "lrs", names) == "warmup"
    assert report.claim_figure("lrs.cosine", "lrs", names) == ""
    assert report.claim_figure("hyb.warmup", "lrs", names) == ""  # another section's id
    assert report.figure_anchor("lrs", "warmup_train") == "fig-lrs-warmup_train"
    assert report.figure_anchor("momentum", "gd_eta0.4") == "fig-momentum-gd_eta0_4"


def test_the_set_up_lists_the_machines_when_the_jobs_used_several(tmp_path, monkeypatch):
    """One machine: the overview says it all. Two (a cluster's nodes): each is listed with
    the cores and GPUs its jobs could use."""
    monkeypatch.chdir(tmp_path)
    fig, ax = plotting.figure()
    plotting.save(fig, paths.figure("s", "c"))
    run = settings.Settings("book", "book", {}, [])

    def job(host, cores, gpus):
        return ENV | {
            "host": host,
            "usable_cores": cores,
            "cuda_devices": gpus,
            "gpus": ["H"] * gpus,
        }

    one = report.render(LEDGER, TABLE, ENV, run, "abc", measured_on=[job("n1", 2, 0)] * 2)
    assert "Machines this run" not in one
    two = report.render(
        LEDGER,
        TABLE,
        ENV,
        run,
        "abc",
        measured_on=[job("n1", 1, 0), job("n1", 16, 2), job("n2", 16, 1)],
    )
    assert "Machines this run" in two
    assert '<td class="mono">n1</td>' in two and "<td>1, 16</td><td>0, 2: H</td>" in two
    assert '<td class="mono">n2</td>' in two
    # Measured on several machines, each claim says on which, in the findings and its row.
    hosted = TABLE.assign(hosts="n2")
    two = report.render(
        LEDGER, hosted, ENV, run, "abc", measured_on=[job("n1", 2, 0), job("n2", 2, 0)]
    )
    assert "</span> (on cpu of n2)." in two and '<div class="reason">on cpu of n2</div>' in two
    one = report.render(LEDGER, hosted, ENV, run, "abc", measured_on=[job("n1", 2, 0)] * 2)
    assert " of n2" not in one  # one machine: named once, on the first line


def test_a_reason_shows_only_what_it_adds_to_what_was_measured():
    measured = "a = 2 (needs < 1)"
    assert report.shown_reason(claims.FAILED_CHECK + measured, measured) == ""
    assert report.shown_reason(measured, measured) == ""  # inconclusive: its checks say so
    mixed = f"{claims.FAILED_CHECK}{measured}; note: warm-up only"
    assert report.shown_reason(mixed, measured) == mixed
    assert report.shown_reason(claims.RAN_BESIDE_OTHERS, measured) == claims.RAN_BESIDE_OTHERS


def test_the_report_says_once_near_the_top_what_a_device_is_and_what_it_could_judge(
    tmp_path, monkeypatch
):
    """On one GPU, 2 devices cannot run whatever the cores: the report says it once, after
    the claims that did not hold and before each chapter's findings, and counts the claims
    that lack a device in one group."""
    monkeypatch.chdir(tmp_path)
    fig, _ = plotting.figure()
    plotting.save(fig, paths.figure("s", "c"))
    lacking = "needs 2 devices, the job that measured it could use 1 (1 GPU)"
    table = pd.concat(
        [
            TABLE,
            pd.DataFrame(
                [
                    ROW
                    | {"id": f"t.{i}", "section": "t", "verdict": claims.NOT_APPLICABLE}
                    | {"reason": lacking}
                    for i in range(2)
                ]
            ),
        ]
    )
    run = settings.Settings("cpu", "cpu", {}, [])
    gpu = ENV | {"host": "vm", "usable_cores": 16, "cuda_devices": 1, "gpus": ["NVIDIA H200"]}
    html = report.render(LEDGER, table, ENV, run, "abc", measured_on=[gpu])
    said = "A device here is a GPU: this run&#39;s jobs could use at most 1 (NVIDIA H200)"
    assert html.count(said) == 1
    assert html.index("What this run found") < html.index(said) < html.index('id="chapter-c"')
    assert "cannot be judged here: 2 need 2 devices" in html
    assert "2 not applicable here: 2 need 2 devices" in html  # the counts at the top
    laptop = report.render(LEDGER, TABLE, ENV, run, "abc")  # no records: the overview's machine
    assert "A device here is one CPU core" in laptop
    assert "the claims about several devices are judged here." in laptop


def test_the_first_line_names_what_measured(tmp_path, monkeypatch):
    """Machine, cores, GPUs, torch (with the pinned version where it differs), preset and
    commit, before anything else of the page."""
    monkeypatch.chdir(tmp_path)
    fig, ax = plotting.figure()
    plotting.save(fig, paths.figure("s", "c"))
    gpu_box = ENV | {
        "host": "box",
        "cpu_model": "Xeon",
        "usable_cores": 16,
        "cuda_devices": 1,
        "gpus": ["NVIDIA H200"],
        "torch_version": "2.11.0+cu130",
    }
    monkeypatch.setattr(report, "pinned_torch", lambda: "2.13.0")
    run = settings.Settings("cpu", "cpu", {}, [])
    html = report.render(LEDGER, TABLE, ENV, run, "abc1234", measured_on=[gpu_box])
    first = (
        "Measured on box: Xeon (16 cores), NVIDIA H200, torch 2.11.0+cu130 (pinned: 2.13.0)"
        " · preset cpu · commit abc1234"
    )
    body = html[html.index("<body>") :]
    assert first in body and body.index(first) < body.index("<h1>")
    # the pinned version itself is not repeated; without records, the run's overview speaks
    laptop = report.measured_by([], ENV, "smoke", "abc1234", "2.13.0")
    assert (
        laptop
        == "Measured on Test CPU (2 cores), no GPU, torch 2.13.0 · preset smoke · commit abc1234"
    )


def test_the_pinned_torch_comes_from_the_package_metadata(repo):
    pins = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"torch=={report.pinned_torch()}" in pins


def test_a_claim_links_the_books_page_in_each_edition_it_quotes_and_its_figure():
    refs = report.cited(
        {
            "sources": [
                {"id": "book", "at": "§13.5", "page": "chapter_computational-performance/x"},
                {"id": "notes", "at": "§6.2"},
            ]
        },
        {
            "book": SOURCES["book"]
            | {"editions": {"EN": "https://d2l.ai/", "ZH": "https://zh.d2l.ai/"}}
        }
        | {"notes": SOURCES["notes"]},
    )
    page = "chapter_computational-performance/x.html"
    both = report.book_links("EN 3.0 → 2.8 s/epoch · ZH 2.7 → 3.6 s", refs)
    assert both == [
        {"label": "EN", "url": f"https://d2l.ai/{page}"},
        {"label": "ZH", "url": f"https://zh.d2l.ai/{page}"},
    ]
    assert report.book_links("not in the book", refs) == [
        {"label": "online", "url": f"https://d2l.ai/{page}"}
    ]


def test_a_claim_whose_id_names_no_figure_links_the_one_the_ledger_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fig, _ = plotting.figure()
    plotting.save(fig, paths.figure("s", "c"))
    ledger = copy.deepcopy(LEDGER)
    ledger["sections"][0]["claims"] = [{"id": "s.c", "claimed_by": "notes", "evidence": "m.csv"}]
    ledger["sections"][0]["claims"].append(
        {"id": "s.other", "claimed_by": "notes", "evidence": "m.csv", "figure": "c"}
    )
    table = pd.concat(
        [TABLE, TABLE[:1].assign(id="s.other", plain="it took 2.5 s, the book 3.0 s")]
    )
    run = settings.Settings("cpu", "cpu", {}, [])
    html = report.render(ledger, table, ENV, run, "abc")
    row = html.split('id="claim-s.other"')[1].split("</tr>")[0]
    assert 'href="#fig-s-c"' in row and "it took 2.5 s, the book 3.0 s" in row
    assert '<div class="reason mono">acc = 0.85</div>' in row  # the ids below the plain words


def test_a_section_says_what_the_preset_changed_of_its_experiments():
    """Made from the deviations and the verdicts: a section whose experiment ran on one seed of
    the book's three never says that nothing was scaled, and names the claims judged at that
    scale and those left to the book's."""
    from d2lrepro.pipeline.report import scale_sentence
    from d2lrepro.pipeline.scaling import SCALED_REASON

    section = {"claims": [{"evidence": "results/multidevice/data_parallel/metrics.csv"}]}
    rows = [
        {"id": "mgpu.1gpu", "reason": "", "scale": "data_parallel.seeds = [0] (book: [0, 1, 2])"},
        {"id": "mgpuc.1gpu", "reason": f"{SCALED_REASON}: preset cpu scaled ...", "scale": ""},
    ]
    seeds = settings.Deviation("data_parallel.seeds", [0, 1, 2], [0])
    cpu = settings.Settings("cpu", "cpu", {}, [seeds])
    said = scale_sentence(section, rows, cpu)
    assert said.startswith("The cpu preset changed 1 of this section's settings")
    assert "so mgpuc.1gpu is judged only at the book's scale" in said
    assert "mgpu.1gpu was judged at this run's scale, as each says" in said
    other = settings.Settings("cpu", "cpu", {}, [settings.Deviation("hybridize.n_calls", 1, 2)])
    assert scale_sentence(section, rows[:1], other) == (
        "The cpu preset runs this section's experiments at the book's settings."
    )
    given = settings.Settings("book", "book", {}, [seeds], frozenset({seeds.key}))
    said = scale_sentence(section, rows, given)
    assert said.startswith("--config or --configfile changed 1 of this section's settings")


def test_the_set_up_lists_a_run_added_with_config_and_says_who_changed_what(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the figure lies where its section and name put it
    plotting.save(plotting.figure()[0], paths.figure("s", "c"))
    added = settings.Deviation(
        "data_parallel.runs.lenet.4", settings.NOT_IN_BOOK, {"model": "lenet", "devices": 4}
    )
    epochs = settings.Deviation("data_parallel.runs.lenet.1.epochs", 10, 2)
    run = settings.Settings("smoke", "smoke", {}, [added, epochs], frozenset({added.key}))
    html = " ".join(report.render(LEDGER, TABLE, ENV, run, commit="abc123").split())
    assert (
        "<code>data_parallel.runs.lenet.4</code> (given with --config or --configfile)</td>"
        "<td>not in the book</td><td>model lenet, devices 4</td>"
    ) in html
    assert "<code>data_parallel.runs.lenet.1.epochs</code></td><td>10</td><td>2</td>" in html

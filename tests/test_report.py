import pandas as pd

from d2lrepro.core import paths, plotting
from d2lrepro.pipeline import claims, report, settings

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


def test_report_is_self_contained_and_shows_book_beside_measured(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the figure lies where its section and name put it
    fig, ax = plotting.figure()
    ax.plot([0, 1], [0, 1])
    plotting.save(fig, paths.figure("s", "c"), footer="Test CPU")
    ledger = {
        "sections": [
            {
                "id": "s",
                "title": "Section <one>",
                "source": "seed",
                "figures": [{"name": "c", "caption": "A line"}],
                "claims": [],
            }
        ]
    }
    table = pd.DataFrame(
        [
            {
                "id": "s.c",
                "kind": "measurement",
                "section": "s",
                "statement": "It holds",
                "printed": "0.84",
                "measured": "acc = 0.85",
                "verdict": claims.NOT_REPRODUCED,
                "reason": "failed: acc",
                "device": "cpu",
                "evidence": "m.csv",
            }
        ]
    )
    run = settings.Settings("auto", "smoke", {}, [settings.Deviation("train.epochs", 10, 1)])
    html = report.render(ledger, table, ENV, run, commit="abc123")
    assert "Section &lt;one&gt;" in html  # escaped
    assert "data:image/png;base64," in html and 'src="/' not in html
    for text in (
        "It holds",
        "0.84",
        "acc = 0.85",
        "not reproduced",
        "failed: acc",
        "smoke",
        "train.epochs",
        "Test CPU",
        "abc123",
        "1 not reproduced: 1 measurement, 0 printed outputs",
        "0 reproduced: 0 measurements, 0 printed outputs",
        '<span class="kind">measurements</span>',  # the contents count the kinds apart
        '<div class="reason">measurement</div>',
        "Not reproduced (1)",
        'href="#claim-s.c"',
        '<figure id="fig-s-c">',
        'href="#fig-s-c"',  # the claim s.c links to the figure named after it
    ):
        assert text in html, text


def test_a_claim_links_to_the_figure_named_after_it_or_its_prefix():
    names = ["warmup_train", "warmup"]
    assert report.claim_figure("lrs.warmup_train.intended", "lrs", names) == "warmup_train"
    assert report.claim_figure("lrs.warmup.book", "lrs", names) == "warmup"
    assert report.claim_figure("lrs.cosine", "lrs", names) == ""
    assert report.claim_figure("hyb.warmup", "lrs", names) == ""  # another section's id
    assert report.figure_anchor("lrs", "warmup_train") == "fig-lrs-warmup_train"
    assert report.figure_anchor("momentum", "gd_eta0.4") == "fig-momentum-gd_eta0_4"

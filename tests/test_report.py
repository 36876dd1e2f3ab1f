"""The Pareto frontier, and the HTML report rendered from stored result files (and in a real Chromium)."""

from __future__ import annotations

import base64
import json
import math
import re
from html.parser import HTMLParser

import pytest

from rapt_audit.cli import main
from rapt_audit.pipeline.results import write_result
from rapt_audit.reporting.pareto import Point, dominates, pareto_front
from tests.result_factory import SIG_B, fake_result, t2t_sweep, write_sweep

# ---------------------------------------------------------------- Pareto frontier on hand-made points

def _labels(points, idx):
    return [points[i].label for i in idx]


def test_pareto_front_on_hand_made_points():
    pts = [Point(0.90, 0.10, "A"), Point(0.80, 0.30, "B"), Point(0.70, 0.20, "C"),  # C: dominated by B
           Point(0.60, 0.50, "D"), Point(0.50, 0.40, "F"),  # F: dominated by D
           Point(0.80, 0.30, "B2"),  # a duplicate of B: neither dominates the other
           Point(0.90, 0.05, "A-")]  # same utility as A, less privacy: dominated by A
    assert _labels(pts, pareto_front(pts)) == ["D", "B", "B2", "A"]


def test_pareto_front_edge_cases():
    assert pareto_front([]) == []
    assert pareto_front([Point(0.5, 0.5)]) == [0]
    # A chain where each point beats the previous on both axes: only the last survives.
    chain = [Point(i / 10, i / 10, str(i)) for i in range(5)]
    assert _labels(chain, pareto_front(chain)) == ["4"]
    # Minimizing the second axis turns the order around.
    assert _labels(chain, pareto_front(chain, maximize=(True, False))) == [str(i) for i in range(5)]
    assert dominates(Point(1, 1), Point(1, 0)) and not dominates(Point(1, 1), Point(1, 1))
    with pytest.raises(ValueError, match="non-finite"):
        pareto_front([Point(math.nan, 0.1, "bad")])


# ---------------------------------------------------------------- rendering from stored files

class _Dom(HTMLParser):
    """Collects tags with attributes, and the text, of a rendered page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data):
        self.text.append(data)

    def find(self, tag, **attrs):
        return [a for t, a in self.tags if t == tag and all(a.get(k, "").split().count(v) or a.get(k) == v
                                                           for k, v in attrs.items())]


def _parse(html: str) -> _Dom:
    dom = _Dom()
    dom.feed(html)
    return dom


def _assert_self_contained(html: str) -> None:
    """No resource from anywhere: every src is a data: URI and no URL with a scheme appears."""
    dom = _parse(html)
    for _, attrs in dom.tags:
        for key in ("src", "href", "srcset", "data", "action"):
            value = attrs.get(key, "")
            assert not re.match(r"^\s*(https?:|//|ws:|wss:|ftp:)", value), (key, value)
        if "src" in attrs:
            assert attrs["src"].startswith("data:image/png;base64,"), attrs["src"][:40]
    assert not re.search(r"(?i)\b(?:src|href)\s*=\s*['\"]?\s*(?:https?:)?//", html)
    assert "<script" not in html.lower() and "@import" not in html and "url(" not in html


@pytest.fixture
def rendered(tmp_path, monkeypatch):
    """A report of a stored η sweep plus a seed-0/1 pair, written without running anything."""
    from rapt_audit.pipeline import runner

    def no_run(*_a, **_k):
        raise AssertionError("the report must not run anything")

    monkeypatch.setattr(runner, "run", no_run)
    runs = t2t_sweep(tmp_path / "runs")
    write_result(fake_result(defense="pct2t", eta=75, accuracy=0.75, privacy={"whitebox": 0.6, "random_guess": 0.96},
                             seed=0), tmp_path / "runs" / "pct2t-s0")
    write_result(fake_result(defense="pct2t", eta=75, accuracy=0.77, privacy={"whitebox": 0.62, "random_guess": 0.96},
                             seed=1), tmp_path / "runs" / "pct2t-s1")
    out = tmp_path / "site" / "index.html"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    return out


def test_report_renders_stored_results(rendered):
    html = rendered.read_text(encoding="utf-8")
    dom = _parse(html)
    text = " ".join(dom.text)
    _assert_self_contained(html)
    assert len(dom.find("table", **{"class": "summary"})) == 1  # one comparable group
    rows = [a for t, a in dom.tags if t == "tr" and a.get("id", "").startswith("row-")]
    assert len(rows) == 5  # four t2t settings and one pct2t setting (its two seeds combined)
    for label in ("η=25", "η=75", "η=125", "η=∞"):
        assert label in text
    assert "0.800 [0.780, 0.820]" in html.replace("<b>", "").replace("</b>", "").replace(
        '<span class="ci">', "").replace("</span>", "")  # whitebox at η=25 with its CI
    assert "whitebox ↑" in text and "accuracy ↑" in text and "token_accuracy ↓" in text  # direction arrows
    assert "0, 1" in text and "t-over-2-seeds" in text  # seeds combined with a t-interval
    # One Pareto figure per attack, embedded as a real PNG, and written as PNG and SVG files.
    figures = dom.find("figure")
    assert len(figures) == 2
    for img in dom.find("img"):
        assert base64.b64decode(img["src"].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    fig_dir = rendered.parent / "figures"
    for attack in ("whitebox", "random_guess"):
        assert (fig_dir / f"g1-pareto-{attack}.png").read_bytes()[:4] == b"\x89PNG"
        svg = (fig_dir / f"g1-pareto-{attack}.svg").read_text(encoding="utf-8")
        assert "<svg" in svg and "stroke-dasharray" in svg  # the dashed no-privacy line
        assert "η=25" in svg and "Pareto frontier" in svg  # point labels and the frontier legend
    assert "Calibration: word-replacement probability" in text and "RAPT Tab. III" in text
    assert "Provenance" in text and "fffffffffff" in html and "53aa5117" in html  # git sha, model fingerprint
    assert "SYNTHETIC" not in html  # real data: no warning


def test_pareto_figure_marks_the_frontier(tmp_path):
    """η=125 is dominated by η=75 (less utility, less privacy); every other t2t setting is optimal."""
    from rapt_audit.reporting.collect import collect
    from rapt_audit.reporting.figures import pareto_points
    from rapt_audit.reporting.summary import group_results

    group = group_results(collect([t2t_sweep(tmp_path / "r")]).results)[0]
    points = pareto_points(group, "whitebox", "accuracy")
    assert sorted(points[i].label for i in pareto_front(points)) == ["η=25", "η=75", "η=∞"]
    assert [r.no_privacy for r in group.rows] == [False, False, False, True]


def test_a_figure_rendered_twice_is_the_same_file(tmp_path):
    """Re-rendering a committed report from the same results must not churn its figures (SVG clip ids)."""
    from rapt_audit.reporting.collect import collect
    from rapt_audit.reporting.figures import pareto_figure
    from rapt_audit.reporting.summary import group_results

    group = group_results(collect([t2t_sweep(tmp_path / "r")]).results)[0]
    first, second = (pareto_figure(group, "whitebox", "accuracy", stem="f") for _ in range(2))
    assert "clip-path" in first.svg.decode() and first.svg == second.svg


def test_a_defense_keeps_its_colour_in_every_figure_and_the_legend_lies_beside_the_axes(tmp_path, monkeypatch):
    from rapt_audit.api.plugins import DEFENSES, capabilities_of, load_builtins
    from rapt_audit.reporting import figures
    from rapt_audit.reporting.collect import collect
    from rapt_audit.reporting.summary import group_results

    drawn = []
    render = figures._render
    monkeypatch.setattr(figures, "_render", lambda fig, *a: (drawn.append(fig), render(fig, *a))[1])
    for eta in (25, 75):  # pct2t beside t2t here, alone in the second figure
        write_result(fake_result(defense="pct2t", eta=eta), tmp_path / "both" / f"pct2t-{eta}")
    both = group_results(collect([t2t_sweep(tmp_path / "both")]).results)[0]
    alone = group_results(collect([tmp_path / "both" / "pct2t-25", tmp_path / "both" / "pct2t-75"]).results)[0]
    for group in (both, alone):
        assert figures.pareto_figure(group, "whitebox", "accuracy", stem="f") is not None
    from matplotlib.colors import to_hex

    colours = [{text.get_text(): to_hex(handle.get_color()) for text, handle in
                zip(fig.axes[0].get_legend().get_texts(), fig.axes[0].get_legend().legend_handles)
                if text.get_text() in ("t2t", "pct2t")} for fig in drawn]
    assert colours[0]["pct2t"] == colours[1]["pct2t"] == to_hex(figures.defense_style("pct2t")[0])
    assert colours[0]["t2t"] != colours[0]["pct2t"] and "t2t" not in colours[1]
    caption = figures.pareto_figure(both, "whitebox", "accuracy", stem="f").caption
    assert "1 seed(s) a setting, 95 % intervals (" in caption  # what a reader needs to read the bars
    for fig in drawn:
        fig.canvas.draw()
        legend, axes = fig.axes[0].get_legend().get_window_extent(), fig.axes[0].get_window_extent()
        assert legend.x0 >= axes.x1, "the legend covers the data"
    # Every built-in has a place of its own, and no two defenses share a colour and a marker.
    load_builtins()
    builtins = [name for name in DEFENSES.names() if not DEFENSES.entry(name).origin]
    places = [capabilities_of(name).figure_place for name in builtins]  # declared, never hashed
    assert None not in places and max(places) < len(figures.PALETTE) * len(figures.MARKERS) - figures.PLUGIN_PLACES
    styles = [figures.defense_style(d) for d in builtins]
    assert len(set(styles)) == len(styles) and "#F0E442" not in {c for c, _ in styles}


def test_synthetic_results_carry_a_prominent_warning(tmp_path):
    runs = t2t_sweep(tmp_path / "runs", synthetic=True)
    out = tmp_path / "r.html"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    dom = _parse(out.read_text(encoding="utf-8"))
    banners = dom.find("p", role="alert")
    assert banners, "no alert banner"
    assert "SYNTHETIC DEMO DATA" in out.read_text(encoding="utf-8")
    assert (tmp_path / "r-figures" / "g1-pareto-whitebox.svg").is_file()  # figures next to a non-index report


def test_run_warnings_and_data_caveats_are_shown_once_with_their_settings(tmp_path):
    note = "victim test has only 40 records <b>: intervals are wide"
    cells = {f"eta={eta}": fake_result(eta=eta, seed=seed) for eta, seed in ((25, 0), (25, 1), (75, 0))}
    for name, result in cells.items():
        if name != "eta=75":
            result.warnings.append(note)
        result.dataset["notes"] = {"caveats": "lower-cased & PTB-tokenised"}
        write_result(result, tmp_path / "runs" / f"{name}-{result.config['seed']}")
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "runs"), "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    escaped = "victim test has only 40 records &lt;b&gt;: intervals are wide"
    assert page.count(escaped) == 1 and "<b>:" not in page  # once for both seeds, and escaped
    section = page[page.index(escaped):]
    assert "t2t η=25)" in section[:200] and "η=75" not in section[:200]  # only the setting that carried it
    assert "About the data (sst2): lower-cased &amp; PTB-tokenised" in page


def test_corrupt_file_is_named_and_the_rest_reported(tmp_path, capsys):
    runs = t2t_sweep(tmp_path / "runs")
    bad = runs / "eta=75" / "result.json"
    bad.write_text('{"schema": "rapt-audit/result/1", "signature": ', encoding="utf-8")
    out = tmp_path / "r.html"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert str(bad) in err and "corrupt" in err
    html = out.read_text(encoding="utf-8")
    assert str(bad) in html and "Some inputs were not used" in html
    assert "η=25" in html and "η=125" in html and "η=75" not in html
    assert main(["report", str(runs), "--out", str(tmp_path / "strict.html"), "--strict"]) == 2
    assert not (tmp_path / "strict.html").exists()


def test_other_schema_versions_are_named(tmp_path, capsys):
    runs = t2t_sweep(tmp_path / "runs")
    for cell, schema in (("eta=25", "rapt-audit/result/2"), ("eta=125", "rapt-audit/result/0")):
        path = runs / cell / "result.json"
        doc = json.loads(path.read_text(encoding="utf-8"))
        doc["schema"] = schema
        path.write_text(json.dumps(doc), encoding="utf-8")
    out = tmp_path / "r.html"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "'rapt-audit/result/2'" in err and "'rapt-audit/result/0'" in err
    assert "reads schema 'rapt-audit/result/1'" in err
    assert str(runs / "eta=25" / "result.json") in err
    html = out.read_text(encoding="utf-8")
    assert "rapt-audit/result/2" in html and "η=75" in html


def test_directory_without_results_exits_2(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "r.html"
    assert main(["report", str(empty), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(empty) in err and "holds no result.json" in err
    assert not out.exists()
    # Next to a usable directory, the empty one is reported as left out.
    runs = t2t_sweep(tmp_path / "runs")
    assert main(["report", str(runs), str(empty), "--out", str(out)]) == 0
    assert "holds no result.json" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "nowhere"), "--out", str(out)]) == 2


def test_signature_groups_are_separate_sections(tmp_path):
    runs = t2t_sweep(tmp_path / "runs")
    write_result(fake_result(eta=75, signature=SIG_B, privacy={"whitebox": 0.1}), tmp_path / "runs" / "other")
    out = tmp_path / "r.html"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    dom = _parse(out.read_text(encoding="utf-8"))
    assert len(dom.find("table", **{"class": "summary"})) == 2
    assert len(dom.find("section", **{"class": "group"})) == 2


def test_calibration_documents_are_reported(tmp_path):
    runs = t2t_sweep(tmp_path / "runs")
    doc = {"defense": "t2t", "model": "minilm", "corpus": "wikitext2", "corpus_sentences": 150, "seed": 0,
           "rows": [{"eta": e, "replacement": {"value": v, "ci_low": v - 0.01, "ci_high": v + 0.01, "n": 4000,
                                               "method": "wilson", "level": 0.95},
                     "units": 4000, "rapt_table_iii_bert_base": ref}
                    for e, v, ref in ((25.0, 0.99, 0.94), (75.0, 0.45, 0.85), (125.0, 0.02, 0.45))],
           "deniability": [{"eta": 75.0, "repeats": 100, "tokens_sampled": 3, "n_w": [10, 50, 90], "s_w": [40, 20, 3]}]}
    (runs / "calibration.json").write_text(json.dumps(doc), encoding="utf-8")
    out = tmp_path / "r.html"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert "Calibration documents" in html and "Plausible deniability" in html
    assert (tmp_path / "r-figures" / "cal1-deniability.svg").is_file()
    assert (tmp_path / "r-figures" / "cal1-replacement.png").is_file()


def _claims_section(page: str) -> str:
    start = page.index("<section class='claims' id='claims'>")
    return page[start:page.index("</section>", start)]


def test_seed_claims_section_shows_each_verdict_with_its_numbers_escaped(tmp_path):
    """t2t and pct2t at η = 25 and 75: pct2t more accurate (supported), not equally private at η = 75 (refuted)."""
    odd = "<i>odd</i>&"  # an attack name with markup: it reaches the comparison labels
    cells = {f"{d}-{eta}": fake_result(defense=d, eta=eta, accuracy=0.6 if d == "t2t" else 0.8,
                                       privacy={"whitebox": whitebox, odd: 0.4})
             for d, eta, whitebox in (("t2t", 25, 0.8), ("t2t", 75, 0.5), ("pct2t", 25, 0.8), ("pct2t", 75, 0.6))}
    out = tmp_path / "r.html"
    assert main(["report", str(write_sweep(tmp_path / "runs", cells)), "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "<a href='#claims'>seed claims</a>" in page
    section = _claims_section(page)
    # Accuracy 0.8 − 0.6, each ± 0.02 (95 %): 1.96 · √2 · 0.02 / 1.96 = 0.028 either side, from two intervals.
    utility = section[section.index("<h3>PCT2T &gt; T2T in utility"):]
    assert utility.startswith("<h3>PCT2T &gt; T2T in utility <span class='tag status supported'>supported</span></h3>")
    assert ("<tr><td>η=25: pct2t − t2t</td><td class='num'><b>+0.200</b></td><td class='num'>[+0.172, +0.228]</td>"
            "<td>unpaired</td></tr>") in utility
    assert "significantly higher in 2 of 2 comparisons; against it in 0" in utility
    privacy = section[section.index("<h3>T2T ≈ PCT2T in privacy"):]
    assert privacy.startswith("<h3>T2T ≈ PCT2T in privacy (margin ±0.05) <span class='tag status not-supported'>")
    assert "<td>η=75, whitebox: pct2t − t2t</td><td class='num'><b>+0.100</b></td>" in privacy
    assert "interval inside ±0.05 in 3 of 4 comparisons; against it in 1" in privacy
    # The odd attack is as private at both η: privacy rising is then neither shown nor refuted.
    assert "<h3>privacy rises as η falls <span class='tag status inconclusive'>inconclusive</span></h3>" in section
    # The three claims without a comparison: one line each with the reason, no table.
    assert section.count("<table class='claim'>") == 3
    missing = section[section.index("<ul class='not-evaluable'>"):]
    assert "<li>the reconstruction head helps utility <span class='tag status not-evaluable'>not evaluable</span>: " \
           "the results hold no comparison for this claim</li>" in missing
    assert "no attack measured both rapt and cape or dpnr with utility in one comparable group" in missing
    assert "t2t, &lt;i&gt;odd&lt;/i&gt;&amp;: η=25 − η=75" in section and "<i>odd</i>" not in page


# ---------------------------------------------------------------- a real headless Chromium

@pytest.mark.browser
def test_report_loads_in_headless_chromium(rendered, tmp_path):
    """No console message, no network request, and the tables and figures are in the rendered DOM."""
    from tests.chromium import find_chromium, load_page

    binary = find_chromium()
    page = load_page(binary, rendered, workdir=tmp_path / "chromium")
    assert page.console == [], page.console
    assert page.requests == [], page.requests
    dom = _parse(page.dom)
    assert len(dom.find("table", **{"class": "summary"})) == 1
    assert len([a for t, a in dom.tags if t == "tr" and a.get("id", "").startswith("row-")]) == 5
    assert len(dom.find("figure")) == 2 and all(i["src"].startswith("data:image/png") for i in dom.find("img"))
    assert "Provenance" in " ".join(dom.text)


@pytest.mark.browser
def test_chromium_harness_detects_requests_and_console_errors(tmp_path):
    """The harness itself must be able to fail: a page with a remote image and a script error."""
    from tests.chromium import find_chromium, load_page

    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><head><meta charset='utf-8'><title>bad</title></head><body>"
                   "<img src='http://example.invalid/x.png'><script>console.error('boom')</script></body></html>",
                   encoding="utf-8")
    page = load_page(find_chromium(), bad, workdir=tmp_path / "chromium")
    assert any("example.invalid" in url for url in page.requests)
    assert any("boom" in line for line in page.console)


def test_a_setting_is_labelled_by_its_values_even_at_their_defaults(tmp_path):
    """A defense without η, ε or a replacement target (a plugin's ``p``) shows its own parameters' values, never
    "default" (issue #42); the service's settings after them stay out, and the built-ins' labels are unchanged."""
    from rapt_audit.reporting.collect import collect
    from rapt_audit.reporting.summary import group_results

    service = {"method": "bow", "epochs": None, "lr": None}
    cells = {"word_drop": ("word_drop", {"p": 0.3, **service}),
             "noun_swap-k3": ("noun_swap", {"k": 3, "p": 0.5, "categories": ["noun"], **service}),
             "noun_swap-k5": ("noun_swap", {"k": 5, "p": 0.5, "categories": ["noun"], **service}),
             "served": ("served_only", dict(service)), "identity": ("identity", dict(service)),
             "t2t": ("t2t", None)}
    results = {}
    for seed, (name, (defense, params)) in enumerate(cells.items()):  # a seed each: cells of their own
        results[name] = fake_result(defense=defense, eta=75 if params is None else None, seed=seed)
        if params is not None:
            results[name].defense["params"] = params
    group = group_results(collect([write_sweep(tmp_path / "r", results)]).results)[0]
    labels = sorted((row.defense, row.setting) for row in group.rows)
    assert labels == [("identity", "no privacy"), ("noun_swap", "k=3, p=0.5, categories=['noun']"),
                      ("noun_swap", "k=5, p=0.5, categories=['noun']"), ("served_only", "default"),
                      ("t2t", "η=75"), ("word_drop", "p=0.3")]

"""report.html: one self-contained file with every table and figure, checked in a real browser where one exists."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
from real_parts import skip_unless_required

from benchbase.report.html import render_html
from benchbase.report.output import write_tables
from benchbase.report.report_table import ReportTable

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class _Collected(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.references: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.references += [value for name, value in attrs if name in ("src", "href") and value]

    def handle_data(self, data):
        self.text.append(data)


def _figure(folder: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(4, 3))
    axis.plot([0, 1, 2], [3, 1, 2])
    path = folder / "curve.png"
    figure.savefig(path)
    plt.close(figure)
    return path


def _tables() -> list[ReportTable]:
    return [ReportTable("TTA (minutes)", ["group", "CER 40"], [["torch <script>alert(1)</script>", 2.817],
                                                               ["tf", None]], notes=["NA: not reached"]),
            ReportTable("throughput", ["group", "utt/s"], [["torch", 125.3]])]


def test_the_html_report_is_self_contained_and_escaped(tmp_path):
    page = render_html(_tables(), [_figure(tmp_path)])
    collected = _Collected()
    collected.feed(page)
    assert collected.tags.count("table") == 2 and collected.tags.count("img") == 1
    # Nothing to fetch: every image is inline and every link an anchor inside the page.
    assert all(reference.startswith(("data:image/png;base64,", "#")) for reference in collected.references)
    assert "script" not in collected.tags  # a group name cannot inject markup
    text = "".join(collected.text)
    assert "torch <script>alert(1)</script>" in text and "2.82" in text and "NA" in text


def test_a_table_without_rows_shows_only_its_title_and_notes(tmp_path):
    empty = ReportTable("TTA at the same global batch", ["group", "global batch", "CER 40"], [],
                        notes=["No two groups trained at the same global batch size."])
    collected = _Collected()
    collected.feed(render_html([empty, *_tables()], []))
    assert collected.tags.count("table") == 2  # the two tables with rows; no bare header for the empty one
    text = "".join(collected.text)
    assert "TTA at the same global batch" in text and "No two groups trained at the same global batch size." in text
    assert "global batch</th>" not in render_html([empty], [])


def test_report_writes_the_html_beside_the_markdown(tmp_path):
    written = write_tables(_tables(), tmp_path, [_figure(tmp_path)])
    assert tmp_path / "report.html" in written and tmp_path / "report.md" in written


def _browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def test_a_real_browser_renders_the_report(tmp_path):
    """In CI, Debian's chromium (.ci/run installs it), as root: hence --no-sandbox, as Chromium
    refuses root with its sandbox on. A profile of its own, so that nothing else's is touched."""
    if _browser() is None:
        skip_unless_required("chromium", "no headless Chromium or Chrome on this machine")
    from PIL import Image

    write_tables(_tables(), tmp_path, [_figure(tmp_path)])
    page = (tmp_path / "report.html").as_uri()
    common = [_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              f"--user-data-dir={tmp_path / 'profile'}"]
    try:
        blank = subprocess.run([*common, "--dump-dom", "about:blank"], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        blank = None
    if blank is None or blank.returncode or "<html" not in blank.stdout:
        skip_unless_required("chromium", f"{common[0]} cannot render an empty page on this machine: "
                    f"{blank.stderr[-1000:] if blank else 'no answer in 120 s'}")
    dom = subprocess.run([*common, "--dump-dom", page], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-3000:]
    assert "TTA (minutes)" in dom.stdout and "125.30" in dom.stdout, dom.stdout[-3000:]
    shot = tmp_path / "shot.png"
    subprocess.run([*common, "--window-size=1000,1400", f"--screenshot={shot}", page], capture_output=True,
                   timeout=120, check=True)
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert pixels.shape == (1400, 1000)
    assert pixels.std() > 5  # tables, text and the figure drew something on the white page
    assert (pixels < 100).mean() > 0.001  # dark text is there


def test_each_figure_is_shown_under_the_table_of_its_numbers(tmp_path):
    figures = [_figure(tmp_path).rename(tmp_path / "accuracy-over-time-ds2-mini.png"), _figure(tmp_path)]
    tables = [ReportTable("ds2-mini: last evaluation", ["group", "WER"], [["torch", 31.0]],
                          name="last-evaluation-ds2-mini"), *_tables()]
    page = render_html(tables, figures)
    home = page.index('<section id="last-evaluation-ds2-mini"')
    shown = page.index('<figure id="figure-accuracy-over-time-ds2-mini"')
    assert home < shown < page.index("<section", home + 1)  # in its table's section, not after all 3 tables
    assert page.index('<figure id="figure-curve"') > page.rindex("</section>")  # of no table: at the end
    write_tables(tables, tmp_path, figures)
    markdown = (tmp_path / "report.md").read_text()
    assert markdown.index("ds2-mini: last evaluation") < markdown.index("![accuracy-over-time-ds2-mini]") \
        < markdown.index("TTA (minutes)") < markdown.index("![curve]")

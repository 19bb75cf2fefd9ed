"""gp.ledger_report_html / `gpframe ledger report --html`: the page's content and its escaping.

The page is also loaded in a real browser: tests/integration/test_report_browser.py.
"""

import hashlib
from html.parser import HTMLParser

import pytest

import gpframe as gp
from gpframe.cli import main

EVIL_USER = "<script>alert('user')</script>"
EVIL_QUERY = '<img src=x onerror="alert(1)">'


class _Tags(HTMLParser):
    """Every start tag and its attributes, and the text, as a browser's parser reads them."""

    def __init__(self):
        super().__init__()
        self.tags, self.text = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parse(page):
    p = _Tags()
    p.feed(page)
    return p


def make_ledger(path):
    """A small ledger with hostile ids, names and parameters, savings and an exclusion."""
    s = gp.Session(path=str(path), budget=gp.CGP(rho=1e-3), central=gp.DP(epsilon=1.0))
    users = [f"u{i}" for i in range(12)] + [EVIL_USER, 4711]
    params = {"zone": "</td><b>x</b>", "excluded_users": ["<i>gone</i>"]}
    with s.reserve(users, 0.2, notion="central", query=EVIL_QUERY, params=params) as r:
        r.charge([0.05 * (i % 4) for i in range(len(users) - 2)] + [0.2, 0.1])
    with s.reserve([EVIL_USER], 0.7, notion="central", query="range_count") as r:
        r.charge([0.7])  # the hostile user is the most spent: it is in the top table
    with s.reserve(users[:6], 1e-4, notion="metric", query="privatize",
                   params={"q_m": list(range(1000))}) as r:  # fmt: skip
        r.charge(1e-4)
    s.close()
    return path


@pytest.fixture
def ledger_path(tmp_path):
    return make_ledger(tmp_path / "ledger.sqlite")


@pytest.fixture
def page(ledger_path, tmp_path):
    with gp.Session(path=str(ledger_path), readonly=True) as s:
        out = gp.ledger_report_html(s, tmp_path / "r.html", top=5)
    return out.read_text(encoding="utf-8")


def test_page_has_every_section_and_no_script_or_remote_content(page):
    p = parse(page)
    ids = {a.get("id") for _, a in p.tags}
    assert {"filters", "integrity", "summary", "distribution", "exhaustion", "timeline",
            "savings"} <= ids  # fmt: skip
    assert not [t for t, _ in p.tags if t in ("script", "iframe", "object", "embed", "link")]
    assert not [k for _, a in p.tags for k in a if k.startswith("on")]
    assert not [v for _, a in p.tags for k, v in a.items() if k in ("src", "href")]
    csp = next(a for t, a in p.tags if t == "meta" and a.get("http-equiv"))
    assert "default-src 'none'" in csp["content"] and "script" not in csp["content"]
    charts = [a["data-chart"] for t, a in p.tags if t == "svg"]
    assert {"histogram-metric", "histogram-central", "timeline-metric", "timeline-central",
            "savings"} <= set(charts)  # fmt: skip


def test_hostile_strings_are_text_not_markup(page):
    p = parse(page)
    text = "".join(p.text)
    assert EVIL_USER in text and EVIL_QUERY in text and "</td><b>x</b>" in text
    assert "&lt;script&gt;alert(&#x27;user&#x27;)&lt;/script&gt;" in page
    assert "<script" not in page and "<img" not in page and "<b>x" not in page
    assert "<i>gone" not in page and "<i>gone" not in text  # excluded ids are counted, not listed


def test_top_table_lists_the_most_spent_first(page):
    section = page.split('id="exhaustion"')[1].split("</section>")[0]
    rows = section.split("<tr>")[2:]  # after the header row
    assert len(rows) == 5
    assert "&lt;script&gt;" in rows[0] and "90.0 %" in rows[0]  # 0.2 + 0.7 of 1


def test_timeline_shows_parameters_charges_and_exclusions(page):
    section = page.split('id="timeline"')[1].split("</section>")[0]
    assert "range_count" in section and "privatize" in section
    assert "q_m=[0, 1, 2" in section and "…" in section  # long values shortened
    savings = page.split('id="savings"')[1]
    assert "queries that saved" in savings and "%" in savings


def test_filters_are_shown_and_applied(ledger_path, tmp_path):
    with gp.Session(path=str(ledger_path), readonly=True) as s:
        text = gp.ledger_report_html(
            s, tmp_path / "f.html", users=["u1", 4711], notion="central", since="2000-01-01"
        ).read_text()
    filters = text.split('id="filters"')[1].split("</section>")[0]
    assert "u1, 4711" in filters and "central" in filters and "2000-01-01T00:00:00+00:00" in filters
    assert "histogram-metric" not in text and "privatize" not in text
    top = text.split('id="exhaustion"')[1].split("</section>")[0]
    assert "&lt;script&gt;" not in top and ">4711<" in top


def test_bad_arguments_write_nothing_and_touch_nothing(ledger_path, tmp_path):
    with gp.Session(path=str(ledger_path), readonly=True) as s:
        before = s.ledger.snapshot()
        out = tmp_path / "x.html"
        for kwargs, match in [
            ({"since": "soon"}, "since='soon'"),
            ({"top": 0}, "top=0"),
            ({"top": True}, "top=True"),
            ({"users": ["nobody"]}, "no user 'nobody'"),
            ({"notion": "all"}, "notion='all'"),
        ]:
            with pytest.raises(gp.InvalidInputError, match=match):
                gp.ledger_report_html(s, out, **kwargs)
        with pytest.raises(gp.InvalidInputError, match="does not exist"):
            gp.ledger_report_html(s, tmp_path / "no" / "x.html")
        with pytest.raises(gp.InvalidInputError, match="is a directory"):
            gp.ledger_report_html(s, tmp_path)
        with pytest.raises(gp.InvalidInputError, match="path=3"):
            gp.ledger_report_html(s, 3)
        assert not out.exists() and s.ledger.snapshot() == before


def test_cli_html_writes_the_page_and_leaves_the_ledger_alone(ledger_path, tmp_path, capsys):
    digest = hashlib.sha256(ledger_path.read_bytes()).hexdigest()
    out = tmp_path / "cli.html"
    args = ["ledger", "report", str(ledger_path), "--html", str(out), "--since", "7d",
            "--top", "3", "--notion", "central", "--user", "4711"]  # fmt: skip
    assert main(args) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    text = out.read_text()
    assert "the top 3" in text and "(7d)" in text and "✔ intact" in text
    assert hashlib.sha256(ledger_path.read_bytes()).hexdigest() == digest


def test_empty_ledger_page_says_so(tmp_path):
    s = gp.Session(central=gp.DP(epsilon=1.0))
    text = gp.ledger_report_html(s, tmp_path / "e.html").read_text()
    assert "No users match the filters." in text and "No charges match the filters." in text

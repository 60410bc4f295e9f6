"""Page assembly: one self-contained HTML document (inline CSS, inline SVG, no script, no network) that
prints well and reflows in a narrow window."""

from __future__ import annotations

from collections.abc import Sequence

import memfit
from memfit.report.html.markup import Html, el, join

CSS = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d0d7de;--soft:#eaeef2;--bg:#f6f8fa;--card:#fff}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;background:var(--bg);color:var(--fg);
 font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","DejaVu Sans",Arial,sans-serif}
main{max-width:940px;margin:0 auto;padding:22px 20px 40px}
header h1{font-size:1.5rem;line-height:1.25;margin:0 0 4px;overflow-wrap:anywhere}
header p{margin:2px 0;color:var(--muted);overflow-wrap:anywhere}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:16px 18px;margin:16px 0}
h2{font-size:1.12rem;margin:0 0 4px}
p.lead{margin:0 0 10px;color:var(--muted)}
p.note{margin:6px 0 0;color:var(--muted);font-size:.9rem}
.kpis{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:10px 12px;margin:14px 0 0}
.kpi{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:8px 14px}
.kpi .k{font-size:.82rem;color:var(--muted)}
.kpi .v{font-size:1.3rem;font-weight:600;font-variant-numeric:tabular-nums;overflow-wrap:anywhere}
.kpi .s{font-size:.82rem;color:var(--muted);overflow-wrap:anywhere}
.ok{color:#1a7f37}.bad{color:#cf222e}
svg.chart{display:block;width:100%;height:auto;margin:6px 0 2px}
svg text{font-family:inherit;font-size:13px;fill:#1f2328}
svg .tick{font-size:12px;fill:#59636e}
svg .small{font-size:12px}
svg .muted{fill:#8c959f}
svg .axislabel{font-size:12.5px;fill:#59636e}
svg .rowlabel{font-size:13px}
svg .val{font-size:12.5px;font-weight:600}
svg .cap{font-size:12.5px;fill:#c62828;font-weight:600}
svg .phase{font-size:12.5px;fill:#59636e;font-weight:600}
svg .peaklabel{font-size:13px;font-weight:700}
svg .marker{font-size:12.5px;font-weight:600}
svg .note-svg{font-size:12.5px;fill:#b42318}
svg .cdf{fill:#c4661f}
svg .grid{stroke:#e3e8ee;stroke-width:1}
svg .peakline{stroke:#1f2328;stroke-width:1.5;stroke-dasharray:3 3}
svg .peakdot{fill:#1f2328;stroke:#fff;stroke-width:2}
svg .connector{stroke:#8c959f;stroke-width:1;stroke-dasharray:2 2}
svg .area{stroke:#fff;stroke-width:.4}
svg .hover{fill:transparent}
svg .rowtext,svg .val,svg .cap,svg .peaklabel,svg .marker,svg .note-svg,svg .phase{
 paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round}
svg .hover:hover{fill:rgba(31,35,40,.07)}
.legend{display:flex;flex-wrap:wrap;gap:4px 16px;font-size:13px;margin:4px 0 2px}
.key{white-space:nowrap;max-width:100%;overflow:hidden;text-overflow:ellipsis}
.sw{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;vertical-align:-1px}
.sw.line{height:0;border-top:2px dashed;border-radius:0;vertical-align:3px;width:18px}
.tablewrap{overflow-x:auto;margin-top:10px}
table{border-collapse:collapse;width:100%;font-size:13.5px}
caption{caption-side:top;text-align:left;font-weight:600;padding:2px 0 6px}
th,td{padding:4px 6px;border-bottom:1px solid var(--soft);text-align:left;vertical-align:top;overflow-wrap:break-word}
td.long{overflow-wrap:anywhere;min-width:8em}
th{font-weight:600;color:var(--muted);border-bottom:1px solid var(--line)}
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.total td{font-weight:600;border-top:1px solid var(--line)}
.two{display:grid;grid-template-columns:repeat(auto-fit,minmax(300px,1fr));gap:0 24px}
code{font-size:.92em;overflow-wrap:anywhere}
footer{color:var(--muted);font-size:.82rem;margin-top:18px;overflow-wrap:anywhere}
@media (max-width:640px){
 body{font-size:14px}
 main{padding:12px 8px 28px}
 section{padding:12px 10px;margin:12px 0}
 header h1{font-size:1.25rem}
 table{font-size:12.5px}
 th,td{padding:3px 5px}
 table.stack thead{display:none}
 table.stack,table.stack tbody,table.stack tr,table.stack td{display:block;width:100%}
 table.stack tr{border-bottom:1px solid var(--line);padding:5px 0}
 table.stack td{border:none;padding:1px 4px;text-align:right;white-space:normal;overflow-wrap:anywhere}
 table.stack td::before{content:attr(data-label);float:left;color:var(--muted);padding-right:10px;text-align:left}
 table.stack td:empty{display:none}
 .kpis{grid-template-columns:repeat(auto-fill,minmax(130px,1fr))}
 .two{grid-template-columns:1fr}
}
@media print{
 *{-webkit-print-color-adjust:exact;print-color-adjust:exact}
 @page{margin:12mm}
 body{background:#fff;font-size:11pt}
 main{max-width:none;padding:0}
 section{border:none;border-top:1px solid #bbb;border-radius:0;padding:8px 0;margin:10px 0;break-inside:avoid}
 .kpi{border-color:#bbb}
 .tablewrap{overflow:visible}
 .two{grid-template-columns:1fr}
 table{font-size:9pt}
 th,td{padding:2px 4px}
 tr{break-inside:avoid}
 svg .hover:hover{fill:transparent}
}
"""


def table(head: Sequence[str], rows: Sequence[Sequence[str]], *, numeric: Sequence[int] = (),
          caption: str | None = None, total_last: bool = False) -> Html:
    """A table: numeric columns right-aligned with tabular figures and never broken inside a number. Tables
    of five or more columns turn into one block per row in a narrow window (each cell labelled with its
    column's name, CSS only)."""
    num = set(numeric)
    header = el("tr", [el("th", h, class_="num" if i in num else None, scope="col") for i, h in enumerate(head)])
    body = []
    for r, row in enumerate(rows):
        cells = [el("td", c, class_="num" if i in num else None, data_label=head[i] if i < len(head) else None)
                 for i, c in enumerate(row)]
        body.append(el("tr", cells, class_="total" if total_last and r == len(rows) - 1 else None))
    inner = [el("caption", caption)] if caption else []
    return el("div", el("table", [*inner, el("thead", [header]), el("tbody", body)],
                        class_="stack" if len(head) >= 5 else None), class_="tablewrap")


def kpi(key: str, value: str, sub: str = "", cls: str | None = None) -> Html:
    return el("div", [el("div", key, class_="k"), el("div", value, class_="v" + (f" {cls}" if cls else "")),
                      *([el("div", sub, class_="s")] if sub else [])], class_="kpi")


def section(title: str, *body: str, lead: str = "", id_: str | None = None) -> Html:
    parts: list[str] = [el("h2", title)]
    if lead:
        parts.append(el("p", lead, class_="lead"))
    parts.extend(body)
    return el("section", parts, id=id_)


def page(*, command: str, title: str, subtitle: Sequence[str], kpis: Sequence[str], sections: Sequence[str],
         source: str | None = None) -> str:
    """The whole document as a string (UTF-8, no external resource)."""
    head = el("head", [
        Html('<meta charset="utf-8">'),
        Html('<meta name="viewport" content="width=device-width, initial-scale=1">'),
        Html('<meta name="generator" content="memfit">'),
        el("title", title),
        el("style", Html(CSS)),
    ])
    header = el("header", [el("h1", title), *[el("p", s) for s in subtitle],
                           el("div", list(kpis), class_="kpis") if kpis else Html("")])
    foot = [f"memfit {memfit.__version__}, {command} report. Sizes: GiB = 1024³ bytes (what torch.cuda and "
            "nvidia-smi report), GB = 10⁹ bytes (what GPU datasheets use); exact bytes in the tables and in "
            "each chart's tooltips."]
    if source:
        foot.append(f" Rendered from {source}.")
    body = el("body", el("main", [header, *sections, el("footer", join(foot))]), data_report=command)
    return "<!doctype html>\n" + el("html", [head, body], lang="en") + "\n"

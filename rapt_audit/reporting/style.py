"""The report's inline stylesheet and Content-Security-Policy (kept apart from the HTML builder).

The policy allows inline styles and ``data:`` images and nothing else: no script, no fetch, no
font or image from anywhere, so the page cannot make a network request even by mistake.
"""

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

STYLE = """
:root { --fg: #1b1f24; --muted: #57606a; --line: #d0d7de; --warn: #b35900; --bad: #a40e26; --good: #1a7f37;
        --bg2: #f6f8fa; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       margin: 0 auto; max-width: 1400px; padding: 1rem 1.5rem 3rem; }
h1 { font-size: 1.6rem; margin: .2rem 0; } h2 { border-bottom: 2px solid var(--line); padding-bottom: .2rem; }
h3 { margin-top: 1.6rem; } h4 { margin: 1rem 0 .3rem; font-family: ui-monospace, monospace; }
header p, .note, .sig, footer { color: var(--muted); }
code { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: .9em; overflow-wrap: anywhere; }
table { border-collapse: collapse; margin: .4rem 0 1rem; display: block; overflow-x: auto; }
th, td { border: 1px solid var(--line); padding: .25rem .45rem; text-align: left; vertical-align: top; }
thead th { background: var(--bg2); position: sticky; top: 0; }
td.num { white-space: nowrap; font-variant-numeric: tabular-nums; }
.ci { color: var(--muted); } .n, .sub, .why { display: block; color: var(--muted); font-size: .78em; }
td.skip { color: var(--muted); font-style: italic; max-width: 18rem; }
td.fail { color: #a61b1b; font-weight: 600; max-width: 18rem; }
.tag { font-size: .72em; border: 1px solid var(--line); border-radius: 3px; padding: 0 .25rem; margin-left: .3rem; }
.tag.warn { color: var(--warn); border-color: var(--warn); }
.banner { border-radius: 6px; padding: .7rem 1rem; margin: .8rem 0; }
div.warn { border-left: 4px solid var(--warn); padding: 0 1em; margin: 0.8em 0; }
.banner.warn { background: #fff4e5; border: 2px solid var(--warn); color: #5c2d00; font-size: 1.05em; }
.banner.problem { background: #ffebe9; border: 2px solid var(--bad); }
.figs { display: grid; grid-template-columns: repeat(auto-fill, minmax(460px, 1fr)); gap: 1rem; }
figure { margin: 0; border: 1px solid var(--line); border-radius: 6px; padding: .5rem; background: #fff; }
figure img { width: 100%; height: auto; }
figcaption { font-size: .85em; color: var(--muted); }
ul.details { margin: 0; padding-left: 1rem; font-size: .8em; max-width: 32rem; }
table.prov td { font-size: .8em; }
nav ol { columns: 2; }
details summary { cursor: pointer; color: var(--muted); font-size: .85em; }
.tag.status { font-weight: 600; white-space: nowrap; border-color: currentColor; }
.status.supported { color: var(--good); background: #dafbe1; }
.status.not-supported { color: var(--bad); background: #ffebe9; }
.status.inconclusive { color: var(--warn); background: #fff4e5; }
.status.not-evaluable { color: var(--muted); background: var(--bg2); }
"""

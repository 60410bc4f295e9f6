"""The self-contained HTML report: inline SVG charts and tables from any command's ``--json`` output.

``render_page(data)`` picks the page from the JSON's keys (estimate, trace, measure, fit, lengths);
``write_report(path, html, force=...)`` writes it atomically. The layers below it: :mod:`.geometry` (pure
chart arithmetic), one module per chart kind (:mod:`.budget`, :mod:`.timeline`, :mod:`.bars`,
:mod:`.sweep`, :mod:`.waterfall`, :mod:`.histogram`, :mod:`.padding`), :mod:`.page` (the document) and
:mod:`.pages` (one page per command). No JavaScript, no external resource: the file opens from disk,
prints, and reflows in a narrow window.
"""

from memfit.report.html.pages import COMMANDS, detect_command, render_page
from memfit.report.html.write import load_result, write_report

__all__ = ["COMMANDS", "detect_command", "load_result", "render_page", "write_report"]

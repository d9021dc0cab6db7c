"""`lerodoc report`: one self-contained HTML page that shows a dataset (summary and validate verdict, channels,
episodes with frames, tasks), and the same facts as JSON.

`assemble.build` gathers (lerodoc.report.data), draws (lerodoc.report.plots, matplotlib, in processes of their own
when workers > 1) and writes the page (lerodoc.report.page). This package imports nothing itself: a drawing process
imports lerodoc.report.plots, and through it this package, without the reading and checking modules.
"""

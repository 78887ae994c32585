"""The results pages' code, a module for each study script beside the shared sections.

* `sections`: what every page reads from a study folder (how it was run, the machine, the
  results and significance tables, learning curves, runs, figures, tables, files);
* `conclusions`: the conclusion sentences any study with a report can have;
* `study`: `StudyPage`, what a study's page says beyond its data, and `script_page`;
* `catalogue`: every study's `StudyPage`, gathered from the study modules;
* a module per study script (named after it, or after the family of studies it writes), with
  the titles and prose of its studies, their measurement tables and conclusions, and the
  Markdown its script writes from the same JSON.

`python -m experiments.pages` writes the pages.
"""

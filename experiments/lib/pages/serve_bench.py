"""The translation service under load (`python -m experiments.serve_bench`): the page the script
writes, drawn again on the results page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from experiments.lib import reports
from experiments.lib.pages.study import StudyPage


def page(record: dict[str, Any]) -> str:
  off = record["offline"]
  lines = [
    "# The translation service under load",
    "",
    reports.made_by("serve_bench", record)
    + f", run `{record['run']}` (step {record['step']}), greedy decoding. The server: "
    "`seq2seq.serve` on 127.0.0.1, one sentence per request; offline: `translate_lines` "
    "in batches of 64 in the benchmark's process, before the server started.",
    "",
    f"Offline: {off['sentences']} sentences in {off['seconds']:.2f} s, "
    f"**{off['sent_per_s']:.1f} sentences/s** ({reports.fmt(off.get('cpu_ms_per_sentence'), 1)} "
    "CPU ms per sentence). Server start-up with warm-up: "
    f"{record['server_start_s']:.0f} s. The clients run on the same machine as the server: "
    "the CPU columns say what each side spent per sentence.",
    "",
  ]
  rows = [
    [
      str(r["clients"]),
      f"{r['sent_per_s']:.1f}",
      f"{r['sent_per_s'] / off['sent_per_s']:.2f}",
      reports.fmt(r["p50_ms"], 1),
      reports.fmt(r["p99_ms"], 1),
      f"{r['correct']}/{r['requests']}",
      reports.fmt(r.get("server_cpu_ms_per_sentence"), 1),
      reports.fmt(r.get("client_cpu_ms_per_sentence"), 1),
    ]
    for r in record["load"]
  ]
  header = [
    "clients",
    "sentences/s",
    "of offline",
    "p50 ms",
    "p99 ms",
    "same as offline",
    "server CPU ms/sentence",
    "clients' CPU ms/sentence",
  ]
  lines += reports.table(header, rows)
  f, s, t = record["faults"], record["soak"], record["sigterm"]
  lines += [
    "",
    "Faults:",
    f"- {f['malformed']} malformed requests among {f['valid']} valid ones: "
    f"{f['malformed_refused_4xx']} refused with a 4xx and a JSON error, "
    f"{f['valid_answered_right']} valid ones answered right;",
    f"- {f['disconnected_mid_request']} clients that gave up mid-request, a client sending its "
    f"body in three pieces (answered right: {f['slow_client_answered_right']}); healthy "
    f"afterwards: {f['healthy_after']};",
    f"- soak: {s['answered_right']}/{s['requests']} answered right in {s['seconds']:.0f} s; "
    f"resident memory (MiB) at each tenth: {s['rss_mib']};",
    f"- SIGTERM under 64 clients: {t['answered_right']} answered right, {t['refused']} refused, "
    f"{t['other']} other; exit status {t['exit_status']} after {t['exit_s']:.1f} s.",
    "",
  ]
  return "\n".join(lines)


def serve_table(study: Path) -> list[str]:
  """The service benchmark's page body (`page`) under a heading."""
  record = json.loads((study / "serve_bench.json").read_text())
  body = page(record).split("\n", 2)[2]  # Past the script's own title.
  return ["## Measurements", "", *body.splitlines(), "```bash", record["command"], "```", ""]


STUDIES = {
  "serve_bench": StudyPage(
    "The translation service under load",
    "The service (`seq2seq.serve`) answering 1, 8 and 64 concurrent clients against offline "
    "batch decoding of the same sentences, and under faults.",
    measurements=serve_table,
  ),
}

// The explorer's page, built from the JSON in <script id="report-data"> (seq2seq/explorer.py).
// Every string from the data reaches the page through textContent, append(string) or
// setAttribute: none is ever parsed as markup (no innerHTML, no document.write).
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const runs = data.runs;
  const sets = data.sentences; // sets[r][i]: run r's record of sentence i.
  const compare = sets.length === 2;
  const count = sets[0].length;
  const live = data.live || null; // Set on the page the translation service sends.
  const SVG = "http://www.w3.org/2000/svg";
  const COLORS = ["#1f5fa8", "#c2491d", "#2e8b57", "#7b3fa0"];

  // ------------------------------------------------------------------------ DOM helpers
  // el("td", {class: "num", title: "..."}, child, "text", ...): strings become text nodes.
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    setProps(node, props);
    node.append(...children);
    return node;
  }
  function svgEl(tag, props, ...children) {
    const node = document.createElementNS(SVG, tag);
    setProps(node, props);
    node.append(...children);
    return node;
  }
  function setProps(node, props) {
    for (const [key, value] of Object.entries(props || {})) {
      if (key === "class") node.setAttribute("class", value);
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, String(value));
    }
  }
  const fmt = (x, digits) => (x === null || x === undefined ? "–" : Number(x).toFixed(digits));
  const plural = (n, word) => `${n.toLocaleString("en")} ${word}${n === 1 ? "" : "s"}`;
  const runLabel = (r) => (compare ? `${"AB"[r]}: ${runs[r].name}` : runs[r].name);

  // ---------------------------------------------------------------------------- header
  function header() {
    const head = el("header", {}, el("h1", { text: data.title }));
    const cols = [
      ["run", null, 0], ["step", "step", 0], ["sentences", "num_sentences", 0],
      ["beam", "beam_size", 0], ["BLEU", "bleu", 2], ["chrF", "chrf", 2],
      ["No-UNK BLEU", "bleu_no_unk", 2], ["No-UNK sentences", "num_no_unk", 0],
      ["tokenised BLEU", "bleu_tokenized", 2], ["AER", "aer", 3],
      ["entropy (reference)", "attention_entropy", 2], ["loss", "loss", 4], ["perplexity", "perplexity", 2],
    ];
    const table = el("table", { class: "summary" });
    table.append(el("tr", {}, ...cols.map(([label]) => el("th", { text: label }))));
    runs.forEach((run, r) => {
      const cells = cols.map(([, key, digits]) =>
        key === null
          ? el("td", { text: runLabel(r), title: run.workdir })
          : el("td", { class: "num", text: fmt(run.results[key], digits) })
      );
      table.append(el("tr", {}, ...cells));
    });
    head.append(table);
    const sig = runs[0].results.bleu_signature;
    if (sig) head.append(el("p", { class: "note", text: `sacrebleu: ${sig}` }));
    return head;
  }

  // ------------------------------------------------------------------- the sentence table
  const rec = (r, i) => sets[r][i];
  const unkOf = (x) => (x.unk ? x.unk.source + x.unk.reference : null);
  const any = (key) => sets[0].some((x) => x[key] !== undefined && x[key] !== null);
  const columns = [{ key: "#", label: "#", num: true, get: (i) => i, digits: 0 }];
  columns.push({ key: "source", label: "source", get: (i) => rec(0, i).source });
  columns.push({ key: "reference", label: "reference", get: (i) => rec(0, i).reference });
  if (compare) {
    columns.push({ key: "hypA", label: "hypothesis A", get: (i) => rec(0, i).hypothesis });
    columns.push({ key: "hypB", label: "hypothesis B", get: (i) => rec(1, i).hypothesis });
    columns.push({ key: "bleuA", label: "BLEU A", num: true, digits: 1, get: (i) => rec(0, i).bleu });
    columns.push({ key: "bleuB", label: "BLEU B", num: true, digits: 1, get: (i) => rec(1, i).bleu });
    columns.push({
      key: "delta", label: "Δ BLEU", num: true, digits: 1, title: "sentence BLEU of B minus A",
      get: (i) => rec(1, i).bleu - rec(0, i).bleu,
    });
  } else {
    columns.push({ key: "hyp", label: "hypothesis", get: (i) => rec(0, i).hypothesis });
    columns.push({ key: "bleu", label: "BLEU", num: true, digits: 1, get: (i) => rec(0, i).bleu,
      title: "sentence BLEU (sacrebleu, effective order)" });
    columns.push({ key: "chrf", label: "chrF", num: true, digits: 1, get: (i) => rec(0, i).chrf });
  }
  columns.push({ key: "len", label: "words", num: true, digits: 0, title: "source words",
    get: (i) => rec(0, i).source_words });
  columns.push({ key: "unk", label: "UNK", num: true, digits: 0, get: (i) => unkOf(rec(0, i)),
    title: "<unk> in source + reference (0: in the No-UNK subset)" });
  if (!compare && any("entropy")) {
    columns.push({ key: "entropy", label: "entropy", num: true, digits: 2, get: (i) => rec(0, i).entropy,
      title: "mean entropy (nats) of the decoded attention's rows" });
  }
  if (!compare && any("aer")) {
    columns.push({ key: "aer", label: "AER", num: true, digits: 3, get: (i) => rec(0, i).aer,
      title: "AER of the reference's teacher-forced attention (argmax) against the gold links" });
  }
  const FILTER_KEYS = { bleu: "bleu", chrf: "chrf", len: "len", words: "len", unk: "unk",
    entropy: "entropy", aer: "aer", delta: "delta", "#": "#" };
  if (compare) Object.assign(FILTER_KEYS, { bleu: "bleuA", bleua: "bleuA", bleub: "bleuB" });

  const table = el("table", { class: "sentences", id: "sentence-table" });
  const tbody = el("tbody");
  const rows = [];
  const haystack = [];
  let order = [...Array(count).keys()];
  let visible = order;
  let selected = -1;

  function buildTable() {
    const headRow = el("tr");
    for (const col of columns) {
      const th = el("th", { "data-key": col.key, class: col.num ? "num" : "text",
        title: col.title || "sort by this column", onclick: () => sortBy(col.key) }, col.label);
      col.th = th;
      headRow.append(th);
    }
    table.append(el("thead", {}, headRow), tbody);
    for (let i = 0; i < count; i++) {
      const tr = el("tr", { "data-index": i });
      for (const col of columns) {
        const value = col.get(i);
        tr.append(col.num ? el("td", { class: "num" }, fmt(value, col.digits))
          : el("td", { class: "text", title: value }, value));
      }
      const x = rec(0, i);
      if (x.unk) tr.title = `<unk>: source ${x.unk.source}, reference ${x.unk.reference}, output ${x.unk.output}`;
      tr.addEventListener("click", () => select(i));
      rows.push(tr);
      const texts = sets.map((s) => s[i].hypothesis).concat([x.source, x.reference]);
      haystack.push(texts.join("\n").toLowerCase());
    }
    tbody.append(...rows);
  }

  let sortKey = null;
  let sortDir = 1;
  function sortBy(key) {
    sortDir = key === sortKey ? -sortDir : 1;
    sortKey = key;
    const col = columns.find((c) => c.key === key);
    const values = Array.from({ length: count }, (_, i) => col.get(i));
    order = [...Array(count).keys()].sort((a, b) => {
      const x = values[a], y = values[b];
      const missing = (x === null || x === undefined) - (y === null || y === undefined);
      if (missing) return missing; // Missing values last, either way.
      const c = col.num ? x - y : String(x).localeCompare(String(y));
      return c * sortDir || a - b;
    });
    for (const c of columns) {
      c.th.classList.toggle("sorted", c.key === key);
      c.th.setAttribute("aria-sort", c.key === key ? (sortDir > 0 ? "ascending" : "descending") : "none");
      c.th.dataset.dir = c.key === key ? (sortDir > 0 ? "▲" : "▼") : "";
    }
    table.dataset.sortKey = key;
    table.dataset.sortDir = sortDir > 0 ? "ascending" : "descending";
    applyFilter();
  }

  // "cat bleu<20 len>=30": every word must appear in a text, every condition must hold.
  function parseFilter(text) {
    const words = [], tests = [];
    for (const token of text.toLowerCase().split(/\s+/).filter(Boolean)) {
      const m = /^([a-z#]+)(<=|>=|!=|<|>|=)(-?\d+(?:\.\d+)?)$/.exec(token);
      const key = m && FILTER_KEYS[m[1]];
      const col = key && columns.find((c) => c.key === key);
      if (!col) { words.push(token); continue; }
      const v = Number(m[3]), op = m[2];
      tests.push((i) => {
        const x = col.get(i);
        if (x === null || x === undefined) return false;
        const y = col.digits === undefined ? x : Number(x.toFixed(col.digits));
        return op === "<" ? y < v : op === ">" ? y > v : op === "<=" ? y <= v
          : op === ">=" ? y >= v : op === "=" ? y === v : y !== v;
      });
    }
    return (i) => words.every((w) => haystack[i].includes(w)) && tests.every((t) => t(i));
  }

  const filterBox = el("input", { id: "filter", type: "search", spellcheck: "false",
    placeholder: "filter: words, or bleu<20 len>=30 unk>0" + (compare ? " delta<0" : " aer>0.3") });
  const shown = el("span", { class: "count", id: "shown" });
  // The table holds the first rows of `visible` and grows by PAGE rows as it is scrolled to
  // its end, so sorting and filtering thousands of sentences stays instant.
  const PAGE = 200;
  let rendered = 0;
  function applyFilter() {
    const keep = parseFilter(filterBox.value);
    visible = order.filter(keep);
    rendered = 0;
    tbody.replaceChildren();
    renderMore(PAGE);
    tableWrap.scrollTop = 0;
    shown.textContent = `${plural(visible.length, "sentence")} of ${count.toLocaleString("en")}`;
  }
  function renderMore(n) {
    const upto = Math.min(visible.length, rendered + n);
    tbody.append(...visible.slice(rendered, upto).map((i) => rows[i]));
    rendered = upto;
    table.dataset.rendered = String(rendered);
  }
  filterBox.addEventListener("input", applyFilter);
  const tableWrap = el("div", { class: "table-wrap" }, table);
  tableWrap.addEventListener("scroll", () => {
    if (tableWrap.scrollTop + tableWrap.clientHeight > tableWrap.scrollHeight - 400) renderMore(PAGE);
  });

  function select(i) {
    if (selected >= 0) rows[selected].classList.remove("selected");
    selected = i;
    rows[i].classList.add("selected");
    detail.replaceChildren(...sentenceDetail(i));
  }
  document.addEventListener("keydown", (event) => {
    if (event.target === filterBox || !visible.length) return;
    const step = { ArrowDown: 1, j: 1, ArrowUp: -1, k: -1 }[event.key];
    if (!step) return;
    event.preventDefault();
    const at = visible.indexOf(selected);
    const to = Math.min(Math.max(at + step, 0), visible.length - 1);
    if (to >= rendered) renderMore(to - rendered + PAGE);
    const next = visible[to];
    select(next);
    rows[next].scrollIntoView({ block: "nearest" });
  });

  // ------------------------------------------------------------------ the selected sentence
  const detail = el("div", { id: "detail" });

  function sentenceDetail(i) {
    const x = rec(0, i);
    const parts = [el("h2", { text: `sentence ${i} · corpus line ${x.line}` })];
    const texts = el("dl", { class: "texts" });
    const add = (term, text) => texts.append(el("dt", { text: term }), el("dd", { text }));
    add("source", x.source);
    add("reference", x.reference);
    sets.forEach((set, r) => {
      const y = set[i];
      add(compare ? `hypothesis ${"AB"[r]}` : "hypothesis", y.hypothesis);
      const facts = [`BLEU ${fmt(y.bleu, 1)}`, `chrF ${fmt(y.chrf, 1)}`];
      if (y.aer !== undefined) facts.push(`AER ${fmt(y.aer, 3)}`);
      if (y.entropy !== undefined) facts.push(`entropy ${fmt(y.entropy, 2)} nats`);
      if (y.unk) facts.push(`<unk>: source ${y.unk.source}, reference ${y.unk.reference}, output ${y.unk.output}`);
      add(compare ? `scores ${"AB"[r]}` : "scores", facts.join(" · "));
    });
    parts.push(texts);
    if (live) {
      parts.push(el("button", { type: "button", class: "whatif-open",
        onclick: () => whatIf.open(x.source) }, "what if… (edit, force a prefix, see the beam)"));
    }
    sets.forEach((set, r) => {
      const y = set[i];
      const box = el("div", { class: "maps", "data-run": r });
      if (compare) box.append(el("h3", { text: runLabel(r) }));
      if (!y.attention) {
        box.append(el("p", { class: "note", text: "no attention to draw (the model has none)" }));
      }
      for (const map of (y.attention ? y.attention.maps : [])) {
        box.append(heatmap(`${map.name} (decoded)`, map.name, y.attention.output, y.attention.source, map, null));
      }
      if (y.reference_attention) {
        const ra = y.reference_attention;
        const words = (text) => text.trim().split(/\s+/); // Gold links index whitespace words.
        box.append(heatmap("reference, teacher-forced, with gold links", "reference",
          words(y.reference), words(y.source), ra.map, ra.gold));
      }
      parts.push(box);
    });
    return parts;
  }

  // The weights of an encoded map (report.encode_map): bytes round(w * 254), and the pair
  // 255, k for a run of k + 2 zeros.
  function weights(map) {
    if (map.values) return map.values; // A live answer's weights, as they came.
    const bytes = atob(map.data);
    const out = new Float64Array(map.rows * map.cols);
    let at = 0;
    for (let k = 0; k < bytes.length; k++) {
      const b = bytes.charCodeAt(k);
      if (b === 255) at += bytes.charCodeAt(++k) + 2; // Zeros: the array starts at 0.
      else out[at++] = b / 254;
    }
    return out;
  }

  // One attention map: output words down the side, source words along the top, darker = more
  // weight; gold links (source, target) outlined; the weight under the pointer read out below.
  function heatmap(caption, name, outWords, srcWords, map, gold) {
    const rowsN = map.rows, colsN = map.cols;
    const w = weights(map);
    const cell = Math.max(8, Math.min(15, Math.floor(280 / Math.max(colsN, 1)))); // Two fit.
    const labelW = (words) => Math.min(170, 8 + 6.6 * Math.max(1, ...words.map((s) => s.length)));
    const left = labelW(outWords.slice(0, rowsN)), top = labelW(srcWords.slice(0, colsN));
    const width = left + colsN * cell + 2, height = top + rowsN * cell + 2;
    const root = svgEl("svg", { class: "heatmap", "data-map": name, width, height,
      viewBox: `0 0 ${width} ${height}`, role: "img" });
    root.append(svgEl("title", { text: caption }));
    const colLabels = [], rowLabels = [];
    for (let s = 0; s < colsN; s++) {
      const x = left + s * cell + cell / 2, y = top - 4;
      const t = svgEl("text", { class: "src-label", "data-s": s, x, y,
        transform: `rotate(-90 ${x} ${y})`, "dominant-baseline": "middle" }, srcWords[s] ?? "");
      colLabels.push(t);
      root.append(t);
    }
    for (let t = 0; t < rowsN; t++) {
      const label = svgEl("text", { class: "out-label", "data-t": t, x: left - 4,
        y: top + t * cell + cell / 2, "text-anchor": "end", "dominant-baseline": "middle" },
        outWords[t] ?? "");
      rowLabels.push(label);
      root.append(label);
    }
    for (let t = 0; t < rowsN; t++) {
      for (let s = 0; s < colsN; s++) {
        const v = w[t * colsN + s];
        root.append(svgEl("rect", { class: "cell", "data-t": t, "data-s": s, "data-w": v.toFixed(3),
          x: left + s * cell, y: top + t * cell, width: cell, height: cell,
          fill: `hsl(212, 65%, ${(100 - 78 * v).toFixed(1)}%)` }));
      }
    }
    for (const [s, t] of gold || []) {
      if (s >= colsN || t >= rowsN) continue;
      root.append(svgEl("rect", { class: "gold", "data-t": t, "data-s": s,
        x: left + s * cell + 1.5, y: top + t * cell + 1.5, width: cell - 3, height: cell - 3 }));
    }
    const readout = el("div", { class: "readout", text: "point at a cell for its weight" });
    root.addEventListener("mouseover", (event) => {
      const target = event.target;
      if (!target.classList || !target.classList.contains("cell")) return;
      const t = Number(target.dataset.t), s = Number(target.dataset.s);
      for (const l of colLabels) l.classList.toggle("hot", Number(l.dataset.s) === s);
      for (const l of rowLabels) l.classList.toggle("hot", Number(l.dataset.t) === t);
      readout.textContent = `${outWords[t] ?? ""} ← ${srcWords[s] ?? ""}: ${target.dataset.w}`;
    });
    return el("figure", { class: "map" }, root, el("figcaption", { text: caption }), readout);
  }

  // ----------------------------------------------------------------------------- charts
  function niceTicks(lo, hi, n) {
    if (!(hi > lo)) { hi = lo + 1; }
    const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw);
    const ticks = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
    return ticks;
  }

  // series: [{name, points: [{x, y, label}], color, dashed}]
  function lineChart(title, xLabel, yLabel, series) {
    const W = 560, H = 300, m = { l: 56, r: 14, t: 12, b: 40 };
    const pts = series.flatMap((s) => s.points);
    const fig = el("figure", { class: "chart" });
    if (!pts.length) {
      fig.append(el("figcaption", { text: title }), el("p", { class: "note", text: "no data" }));
      return fig;
    }
    const xs = pts.map((p) => p.x), ys = pts.map((p) => p.y);
    const xmin = Math.min(...xs), xmax = Math.max(...xs);
    const ymin = Math.min(0, ...ys), ymax = Math.max(...ys);
    const sx = (x) => m.l + (xmax > xmin ? (x - xmin) / (xmax - xmin) : 0.5) * (W - m.l - m.r);
    const sy = (y) => H - m.b - (ymax > ymin ? (y - ymin) / (ymax - ymin) : 0.5) * (H - m.t - m.b);
    const root = svgEl("svg", { class: "chart", width: W, height: H, viewBox: `0 0 ${W} ${H}` });
    for (const v of niceTicks(ymin, ymax, 5)) {
      root.append(svgEl("line", { class: "grid", x1: m.l, x2: W - m.r, y1: sy(v), y2: sy(v) }));
      root.append(svgEl("text", { class: "tick", x: m.l - 6, y: sy(v), "text-anchor": "end",
        "dominant-baseline": "middle" }, String(v)));
    }
    for (const v of niceTicks(xmin, xmax, 6)) {
      root.append(svgEl("text", { class: "tick", x: sx(v), y: H - m.b + 14, "text-anchor": "middle" }, String(v)));
    }
    root.append(svgEl("line", { class: "axis", x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b }));
    root.append(svgEl("line", { class: "axis", x1: m.l, x2: m.l, y1: m.t, y2: H - m.b }));
    root.append(svgEl("text", { class: "axis-label", x: (m.l + W - m.r) / 2, y: H - 6, "text-anchor": "middle" }, xLabel));
    root.append(svgEl("text", { class: "axis-label", x: 12, y: (m.t + H - m.b) / 2, "text-anchor": "middle",
      transform: `rotate(-90 12 ${(m.t + H - m.b) / 2})` }, yLabel));
    const legend = el("div", { class: "legend" });
    for (const s of series) {
      if (!s.points.length) continue;
      const d = s.points.map((p, k) => `${k ? "L" : "M"}${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join("");
      root.append(svgEl("path", { class: "series" + (s.dashed ? " dashed" : ""), d, stroke: s.color }));
      for (const p of s.points) {
        root.append(svgEl("circle", { cx: sx(p.x), cy: sy(p.y), r: 2.5, fill: s.color },
          svgEl("title", { text: `${s.name}: ${p.label}` })));
      }
      const swatch = el("span", { class: "swatch" + (s.dashed ? " dashed" : "") });
      swatch.style.borderColor = s.color;
      legend.append(el("span", { class: "key" }, swatch, s.name));
    }
    fig.append(el("figcaption", { text: title }), root, legend);
    return fig;
  }

  function curvesSection() {
    const section = el("section", { id: "curves" });
    const charts = el("div", { class: "charts" });
    let axis = "step";
    const draw = () => {
      const xOf = (p) => (axis === "step" ? p.step : Number(p.minutes.toFixed(2)));
      const label = (p, y) => `step ${p.step}, ${p.minutes.toFixed(1)} min: ${y}`;
      const loss = [], bleu = [];
      runs.forEach((run, r) => {
        const color = COLORS[r % COLORS.length];
        const pts = (rows, key) => rows.filter((p) => p[key] !== undefined && p[key] !== null)
          .map((p) => ({ x: xOf(p), y: p[key], label: label(p, p[key].toFixed(4)) }));
        loss.push({ name: `${runLabel(r)} training loss`, color, points: pts(run.curves.train, "loss") });
        loss.push({ name: `${runLabel(r)} validation loss`, color, dashed: true, points: pts(run.curves.valid, "loss") });
        bleu.push({ name: `${runLabel(r)} validation BLEU (greedy)`, color, points: pts(run.curves.valid, "bleu") });
      });
      const xLabel = axis === "step" ? "training step" : "training minutes (wall clock)";
      charts.replaceChildren(lineChart("loss", xLabel, "loss (per token)", loss),
        lineChart("validation BLEU", xLabel, "BLEU", bleu));
    };
    const choices = el("div", { class: "choices" }, "x axis: ");
    for (const value of ["step", "minutes"]) {
      const input = el("input", { type: "radio", name: "x-axis", value, id: `x-${value}` });
      input.checked = value === axis;
      input.addEventListener("change", () => { axis = value; draw(); });
      choices.append(input, el("label", { for: `x-${value}`, text: value }));
    }
    draw();
    section.append(choices, charts);
    return section;
  }

  function lengthSection() {
    const section = el("section", { id: "length" });
    const series = runs.map((run, r) => ({
      name: runLabel(r), color: COLORS[r % COLORS.length],
      points: run.bleu_by_length.map((b) => ({ x: (b.min_len + b.max_len) / 2, y: b.bleu,
        label: `${b.min_len}-${b.max_len} words, ${b.count} sentences: BLEU ${b.bleu.toFixed(2)}` })),
    }));
    section.append(lineChart("BLEU by source length (bins of 10 words)", "source length (words)", "BLEU", series));
    const table = el("table", { class: "summary" });
    table.append(el("tr", {}, el("th", { text: "source words" }), el("th", { text: "sentences" }),
      ...runs.map((_, r) => el("th", { text: `BLEU ${runLabel(r)}` }))));
    for (const [k, b] of runs[0].bleu_by_length.entries()) {
      const cells = runs.map((run) => el("td", { class: "num", text: fmt(run.bleu_by_length[k]?.bleu, 2) }));
      table.append(el("tr", {}, el("td", { text: `${b.min_len}-${b.max_len}` }),
        el("td", { class: "num", text: String(b.count) }), ...cells));
    }
    section.append(table);
    return section;
  }

  function flatten(obj, prefix, out) {
    for (const [k, v] of Object.entries(obj || {})) {
      const key = prefix ? `${prefix}.${k}` : k;
      if (v && typeof v === "object" && !Array.isArray(v)) flatten(v, key, out);
      else out[key] = JSON.stringify(v);
    }
    return out;
  }

  function configSection() {
    const section = el("section", { id: "config" });
    if (compare) {
      const a = flatten(runs[0].config, "", {}), b = flatten(runs[1].config, "", {});
      const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort().filter((k) => a[k] !== b[k]);
      section.append(el("h2", { text: `fields that differ (${keys.length})` }));
      const table = el("table", { class: "summary" });
      table.append(el("tr", {}, el("th", { text: "field" }), el("th", { text: runLabel(0) }), el("th", { text: runLabel(1) })));
      for (const k of keys) table.append(el("tr", {}, el("td", { text: k }), el("td", { text: a[k] ?? "–" }), el("td", { text: b[k] ?? "–" })));
      section.append(table);
    }
    const boxes = el("div", { class: "configs" });
    runs.forEach((run, r) => {
      boxes.append(el("div", {}, el("h2", { text: `${runLabel(r)} · ${run.workdir}` }),
        el("pre", { class: "config", text: run.config ? JSON.stringify(run.config, null, 2) : "no config.json" })));
    });
    section.append(boxes);
    return section;
  }

  // ----------------------------------------------------------- live: what if, and the beam
  // Only on the page the translation service sends (data.live): new translations come from
  // its POST /translate and /beam. Where the service has a token, the session cookie its
  // sign-in form set goes with them (same origin), never the token itself.
  function liveViews() {
    async function ask(path, body) {
      const headers = { "Content-Type": "application/json" };
      const answer = await fetch(path, { method: "POST", headers, body: JSON.stringify(body) });
      const reply = await answer.json();
      if (!answer.ok) throw new Error(`${reply.error}${reply.field ? ` (${reply.field})` : ""}`);
      return reply;
    }
    const source = el("textarea", { id: "whatif-source", rows: 3, cols: 80, spellcheck: "false" });
    const prefix = el("input", { id: "whatif-prefix", size: 60, placeholder: "target words to start with (optional)" });
    const beam = el("input", { id: "whatif-beam", type: "number", min: 1, max: 64, value: live.beam_size });
    const status = el("p", { id: "whatif-status", class: "note" });
    const result = el("div", { id: "whatif-result" });
    const beamView = el("div", { id: "whatif-beam-view" });
    const request = () => {
      const body = { beam_size: Number(beam.value) };
      if (prefix.value.trim()) body.prefix = prefix.value;
      return body;
    };
    async function run(what, job) {
      status.textContent = `${what}…`;
      status.classList.remove("error");
      try {
        await job();
        status.textContent = "";
      } catch (e) {
        status.textContent = `${what} failed: ${e.message}`;
        status.classList.add("error");
      }
    }
    const translateNow = () => run("translating", async () => {
      const body = { sentences: [source.value], attention: true, beam_size: request().beam_size };
      if (prefix.value.trim()) body.prefixes = [prefix.value];
      const [best] = (await ask("/translate", body)).translations[0];
      const rows = best.attention.length, cols = rows ? best.attention[0].length : 0;
      const out = best.finished ? [...best.tokens, "</s>"] : best.tokens;
      const map = { rows, cols, values: Float64Array.from(best.attention.flat()) };
      result.replaceChildren(
        el("dl", { class: "texts" },
          el("dt", { text: "translation" }), el("dd", { class: "whatif-translation", text: best.text }),
          el("dt", { text: "score" }),
          el("dd", { text: `log p ${fmt(best.score, 3)} · ranked by ${fmt(best.norm_score, 3)} · over the ${best.normalised_over}` })),
        heatmap("attention (what if)", "whatif", out, best.source_tokens, map, null));
    });
    const showBeam = () => run("searching", async () => {
      const body = { sentence: source.value, ...request() };
      beamView.replaceChildren(beamTable((await ask("/beam", body)).beam));
    });
    const section = el("section", { id: "whatif" },
      el("p", { class: "note", text: "Edit the source or force the first target words, then translate " +
        "(the best hypothesis and its attention) or open the beam (what the search kept at each step)." }),
      el("div", { class: "whatif-form" },
        el("label", { text: "source" }), source,
        el("label", { text: "target prefix" }), prefix,
        el("label", { text: "beam size" }), beam),
      el("div", { class: "controls" },
        el("button", { type: "button", id: "whatif-translate", onclick: translateNow }, "translate"),
        el("button", { type: "button", id: "whatif-beam-button", onclick: showBeam }, "beam view")),
      status, result, beamView);
    const views = { section, show: () => {} };
    views.open = (text) => {
      source.value = text;
      prefix.value = "";
      result.replaceChildren();
      beamView.replaceChildren();
      views.show();
      source.focus();
    };
    if (count) source.value = rec(0, 0).source;
    return views;
  }

  // The beam: one row per step; the hypotheses it kept (score: summed log p) and those that
  // ended with </s> there (ranked by the length penalty's score), the winner's path marked.
  function beamTable(view) {
    const won = view.translation.finished ? [...view.translation.tokens, "</s>"] : view.translation.tokens;
    const onPath = (tokens) => tokens.every((t, j) => t === won[j]);
    const [winStep, winKind, winIndex] = view.winner || [-1, "", -1];
    const cand = (c, kind, step, index) => {
      const classes = ["cand", kind];
      if (onPath(c.tokens)) classes.push("path");
      if (step === winStep && kind === winKind && index === winIndex) classes.push("won");
      if (kind === "finished" && !c.entered) classes.push("dropped");
      const score = kind === "finished" ? `${fmt(c.score, 2)} → ${fmt(c.norm_score, 3)}` : fmt(c.score, 2);
      return el("div", { class: classes.join(" "), "data-step": step, "data-kind": kind, "data-index": index,
        title: `from slot ${c.from}` }, el("span", { class: "words", text: c.tokens.join(" ") }),
        el("span", { class: "num", text: score }));
    };
    const table = el("table", { class: "beam" },
      el("tr", {}, el("th", { text: "step" }), el("th", { text: `kept (${view.beam_size} at most)` }),
        el("th", { text: "ended here (→ ranking score; struck out: not among the best finished)" })));
    view.steps.forEach((step, t) => {
      table.append(el("tr", { "data-step": t }, el("td", { class: "num", text: String(t + 1) }),
        el("td", {}, ...step.live.map((c, i) => cand(c, "live", t, i))),
        el("td", {}, ...step.finished.map((c, i) => cand(c, "finished", t, i)))));
    });
    const search = view.beam_size === 1 ? "greedy (beam 1)" : `beam ${view.beam_size}`;
    const summary = `${search}, length penalty ${view.length_penalty}: ` +
      `“${view.translation.text}” (log p ${fmt(view.translation.score, 3)})` +
      (view.translation.finished ? "" : ", cut at the length limit");
    return el("div", {}, el("p", { class: "beam-summary", text: summary }), table);
  }
  const whatIf = live ? liveViews() : null;

  // ------------------------------------------------------------------------------ layout
  function tabs(sections) {
    const nav = el("nav", { class: "tabs" });
    const show = (id) => {
      for (const [key, section] of Object.entries(sections)) section.hidden = key !== id;
      for (const button of nav.children) button.classList.toggle("active", button.dataset.tab === id);
    };
    for (const [id, section] of Object.entries(sections)) {
      nav.append(el("button", { type: "button", "data-tab": id, onclick: () => show(id) }, section.dataset.title));
    }
    show(Object.keys(sections)[0]);
    nav.show = show;
    return nav;
  }

  buildTable();
  const sentences = el("section", { id: "sentences" },
    el("div", { class: "controls" }, filterBox, shown),
    el("div", { class: "panes" }, tableWrap, detail));
  const sections = { sentences, curves: curvesSection(), length: lengthSection(), config: configSection() };
  const titles = { sentences: `sentences (${count.toLocaleString("en")})`, curves: "training curves",
    length: "BLEU by length", config: "config" };
  if (live) {
    sections.whatif = whatIf.section;
    titles.whatif = "what if";
  }
  for (const [id, section] of Object.entries(sections)) section.dataset.title = titles[id];
  const nav = tabs(sections);
  if (live) whatIf.show = () => nav.show("whatif");
  document.body.append(header(), nav, ...Object.values(sections));
  document.title = data.title;
  sortBy("#");
  if (count) select(0);
  window.reportLoadMs = performance.now();
  document.documentElement.dataset.ready = "1";
})();

"""The explorer (seq2seq/explorer.py) in a real headless Chromium: opened from disk, the table
sorted and filtered, a sentence selected and its heatmap's cells and labels read back from the
DOM, hostile corpus lines shown as text with nothing run, a comparison of two runs, and the
load time of a 3,000-sentence report. Skips, saying why, without selenium or a Chromium."""

import json
import time

import numpy as np
import pytest
from helpers import explorer_records, explorer_run, loopback_server

from experiments import explorer_timing
from experiments.lib import browser
from seq2seq import explorer, translate

pytestmark = pytest.mark.skipif(browser.missing() is not None, reason=str(browser.missing()))

XSS_SOURCE = '<img src=x onerror="window.__xss = 1; alert(1)">'
XSS_REFERENCE = "</script><script>window.__xss = 2</script><!--"
XSS_HYPOTHESIS = "<b>bold</b> &amp; & \u2028 <svg onload=alert(3)>"
XSS_CONFIG = "<img src=x onerror=alert(4)>"


@pytest.fixture(scope="module")
def driver():
  d = browser.start()
  yield d
  d.quit()


def hostile_report(tmp_path, n=40):
  """A report of `n` made-up sentences; sentence 3 and the config hold markup and script."""
  records = explorer_records(n, seed=1)
  records[3].update(source=XSS_SOURCE, reference=XSS_REFERENCE, hypothesis=XSS_HYPOTHESIS)
  run = explorer_run("hostile")
  run["config"]["data"] = {"corpus": XSS_CONFIG}
  path = tmp_path / "report.html"
  path.write_text(explorer.render(explorer.page_data([run], [records], "test")), encoding="utf-8")
  return path, records


def table_order(driver):
  return [int(i) for i in driver.execute_script(REVIEW_ORDER)]


REVIEW_ORDER = (
  "return [...document.querySelectorAll('#sentence-table tbody tr')].map(r => r.dataset.index)"
)


def click_header(driver, key):
  driver.find_element("css selector", f'#sentence-table th[data-key="{key}"]').click()


def assert_nothing_ran(driver):
  from selenium.common.exceptions import NoAlertPresentException

  with pytest.raises(NoAlertPresentException):
    driver.switch_to.alert.text  # noqa: B018
  assert driver.execute_script("return window.__xss === undefined")
  injected = "img, b, #sentence-table svg, dd *, pre *"  # None of these comes from the data.
  assert driver.execute_script(f"return document.querySelectorAll('{injected}').length") == 0
  assert driver.execute_script("return document.querySelectorAll('script').length") == 2


def test_table_sorts_filters_and_draws_the_selected_heatmap(driver, tmp_path):
  path, records = hostile_report(tmp_path)
  load_ms = browser.open_report(driver, path)
  assert load_ms > 0
  assert not driver.find_elements("css selector", "#whatif, .whatif-open")  # No server: no what-if.
  assert table_order(driver) == list(range(len(records)))  # Corpus order to begin with.
  bleu = np.array([r["bleu"] for r in records])
  click_header(driver, "bleu")
  assert table_order(driver) == np.argsort(bleu, kind="stable").tolist()
  click_header(driver, "bleu")
  assert table_order(driver) == np.argsort(-bleu, kind="stable").tolist()
  table = driver.find_element("id", "sentence-table")
  assert table.get_attribute("data-sort-key") == "bleu"
  assert table.get_attribute("data-sort-dir") == "descending"

  box = driver.find_element("id", "filter")
  box.send_keys("bleu<40 len>=10")
  # Conditions compare the values as the table shows them (BLEU to one decimal).
  words = [r["source_words"] for r in records]
  want = [i for i in np.argsort(-bleu, kind="stable") if round(bleu[i], 1) < 40 and words[i] >= 10]
  assert table_order(driver) == want
  assert driver.find_element("id", "shown").text.startswith(f"{len(want)} sentence")
  box.clear()
  box.send_keys("s7w2")  # Words match the texts.
  assert table_order(driver) == [7]
  box.clear()
  box.send_keys(" ")
  assert len(table_order(driver)) == len(records)

  pick = 7
  driver.find_element("css selector", f'#sentence-table tr[data-index="{pick}"]').click()
  assert driver.find_element("css selector", "#detail h2").text.startswith(f"sentence {pick}")
  rec = records[pick]
  svg = driver.find_element("css selector", '#detail svg.heatmap[data-map="attention"]')
  alpha = explorer.decode_map(rec["attention"]["maps"][0])
  cells = svg.find_elements("css selector", "rect.cell")
  assert len(cells) == alpha.size
  weights = driver.execute_script(
    "return [...arguments[0].querySelectorAll('rect.cell')]"
    ".map(c => [+c.dataset.t, +c.dataset.s, +c.dataset.w])",
    svg,
  )
  got = np.zeros_like(alpha)
  for t, s, w in weights:
    got[t, s] = w
  np.testing.assert_allclose(got, alpha, atol=6e-4)  # Three decimals in the DOM.
  assert labels_of(svg, "text.src-label") == rec["attention"]["source"]
  assert labels_of(svg, "text.out-label") == rec["attention"]["output"][: alpha.shape[0]]
  # The reference's map marks each gold link.
  ref_svg = driver.find_element("css selector", '#detail svg.heatmap[data-map="reference"]')
  gold = ref_svg.find_elements("css selector", "rect.gold")
  links = sorted((int(g.get_attribute("data-s")), int(g.get_attribute("data-t"))) for g in gold)
  assert links == sorted(tuple(x) for x in rec["reference_attention"]["gold"])
  assert labels_of(ref_svg, "text.out-label") == rec["reference"].split()
  # Hovering a cell reads its weight out and lights its words.
  from selenium.webdriver.common.action_chains import ActionChains

  cell = svg.find_element("css selector", 'rect.cell[data-t="1"][data-s="2"]')
  ActionChains(driver).move_to_element(cell).perform()
  readout = svg.find_element("xpath", "../div[@class='readout']").text
  out_word, src_word = rec["attention"]["output"][1], rec["attention"]["source"][2]
  assert readout == f"{out_word} ← {src_word}: {alpha[1, 2]:.3f}"
  hot = svg.find_elements("css selector", "text.hot")
  assert sorted(h.get_attribute("textContent") for h in hot) == sorted([out_word, src_word])

  # Keyboard: "j" selects the next row of the table as sorted (by BLEU, descending).
  order = table_order(driver)
  driver.find_element("tag name", "body").send_keys("j")
  after = order[order.index(pick) + 1]
  assert driver.find_element("css selector", "#detail h2").text.startswith(f"sentence {after} ")
  driver.save_screenshot(str(tmp_path / "explorer.png"))
  assert (tmp_path / "explorer.png").stat().st_size > 10_000


def labels_of(svg, selector):
  return [e.get_attribute("textContent") for e in svg.find_elements("css selector", selector)]


def test_hostile_strings_appear_literally_and_run_nothing(driver, tmp_path):
  path, records = hostile_report(tmp_path)
  html = path.read_text(encoding="utf-8")
  assert XSS_SOURCE not in html and "</script><script>" not in html
  browser.open_report(driver, path)
  assert_nothing_ran(driver)
  row = driver.find_element("css selector", '#sentence-table tr[data-index="3"]')
  texts = [td.get_attribute("textContent") for td in row.find_elements("tag name", "td")]
  assert texts[1:4] == [XSS_SOURCE, XSS_REFERENCE, XSS_HYPOTHESIS]
  row.click()
  detail = [dd.get_attribute("textContent") for dd in driver.find_elements("css selector", "dd")]
  assert detail[:3] == [XSS_SOURCE, XSS_REFERENCE, XSS_HYPOTHESIS]
  assert_nothing_ran(driver)
  driver.find_element("css selector", 'nav button[data-tab="config"]').click()
  config = driver.find_element("css selector", "pre.config").get_attribute("textContent")
  assert json.loads(config)["data"]["corpus"] == XSS_CONFIG
  driver.find_element("css selector", 'nav button[data-tab="curves"]').click()
  assert len(driver.find_elements("css selector", "#curves path.series")) == 3  # 2 losses, BLEU.
  driver.find_element("css selector", "#x-minutes").click()
  assert "minutes" in driver.find_element("css selector", "#curves svg.chart").text
  assert_nothing_ran(driver)


def test_comparison_sorts_by_the_bleu_difference_and_draws_both_runs(driver, tmp_path):
  a, b = explorer_records(30, seed=2), explorer_records(30, seed=2, heads=2)
  for i, (x, y) in enumerate(zip(a, b, strict=True)):
    y.update(bleu=float((i * 37) % 100), hypothesis=f"other {i}")
    x.update(bleu=50.0)
  data = explorer.page_data([explorer_run("a"), explorer_run("b", 200)], [a, b], "test")
  path = tmp_path / "compare.html"
  path.write_text(explorer.render(data), encoding="utf-8")
  browser.open_report(driver, path)
  click_header(driver, "delta")
  delta = np.array([y["bleu"] - x["bleu"] for x, y in zip(a, b, strict=True)])
  assert table_order(driver) == np.argsort(delta, kind="stable").tolist()
  first = driver.find_element("css selector", "#sentence-table tbody tr")
  cells = [td.text for td in first.find_elements("tag name", "td")]
  assert cells[4] == f"other {table_order(driver)[0]}" and float(cells[7]) == delta.min()
  first.click()
  maps = driver.find_elements("css selector", "#detail .maps")
  assert [m.get_attribute("data-run") for m in maps] == ["0", "1"]
  names = lambda m: [s.get_attribute("data-map") for s in m.find_elements("css selector", "svg")]
  assert names(maps[0]) == ["attention", "reference"]
  assert names(maps[1]) == ["attention", "head 1", "head 2", "reference"]  # One map per head.
  driver.find_element("css selector", 'nav button[data-tab="config"]').click()
  differ = driver.find_element("css selector", "#config table").text
  assert "train.num_steps" in differ and "model.score" not in differ
  assert_nothing_ran(driver)


def test_three_thousand_sentences_load_in_seconds(driver, tmp_path):
  records = explorer_records(3_000, seed=3, max_words=40)
  path = tmp_path / "big.html"
  path.write_text(explorer.render(explorer.page_data([explorer_run()], [records], "test")))
  size_mb = path.stat().st_size / 1e6
  load_ms = browser.open_report(driver, path)
  start = time.perf_counter()
  click_header(driver, "bleu")
  sort_ms = (time.perf_counter() - start) * 1e3
  print(
    f"3,000 sentences: {size_mb:.1f} MB, loaded in {load_ms:.0f} ms, sorted in {sort_ms:.0f} ms"
  )
  bleu = np.array([r["bleu"] for r in records])
  shown = table_order(driver)  # The first page; scrolling to the end appends the next ones.
  assert shown == np.argsort(bleu, kind="stable")[: len(shown)].tolist() and len(shown) < 3_000
  driver.execute_script("document.querySelector('.table-wrap').scrollTop = 1e9")
  time.sleep(0.5)
  assert len(table_order(driver)) > len(shown)
  assert driver.find_element("id", "shown").text == "3,000 sentences of 3,000"
  assert size_mb < 15 and load_ms < 10_000 and sort_ms < 5_000


def test_explorer_timing_writes_its_figures_with_the_machine(tmp_path):
  path, records = hostile_report(tmp_path, n=30)
  out = tmp_path / "timing.json"
  explorer_timing.main([str(path), "--loads", "2", "--json", str(out)])
  timing = json.loads(out.read_text())
  assert timing["sentences"] == len(records) and timing["bytes"] == path.stat().st_size
  assert len(timing["load_ms"]) == 2 and timing["load_ms_median"] > 0
  assert timing["sort_by_bleu_ms"] > 0 and "load_average" in timing and timing["browser"]


# The live explorer, served by the translation service (seq2seq.serve) from the session's run.
@pytest.fixture(scope="module")
def live_server(trained):
  import seq2seq

  translator = seq2seq.load(trained)
  with loopback_server(translator) as (_, url):
    yield translator, url


def wait_for(driver, script, timeout_s=60.0):
  """The value of `script` once it is truthy (None after `timeout_s`)."""
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    value = driver.execute_script(script)
    if value:
      return value
    time.sleep(0.1)
  return None


def test_live_what_if_translates_an_edited_source_under_a_prefix(driver, live_server):
  translator, url = live_server
  driver.get(f"{url}/explorer")
  assert wait_for(driver, "return document.documentElement.dataset.ready")
  tabs = [b.text for b in driver.find_elements("css selector", "nav.tabs button")]
  assert tabs[-1] == "what if"
  driver.find_element("css selector", '#sentence-table tr[data-index="2"]').click()
  driver.find_element("css selector", "#detail .whatif-open").click()
  source = driver.find_element("id", "whatif-source")
  assert source.is_displayed()
  first = json.loads(driver.find_element("id", "report-data").get_attribute("textContent"))
  assert source.get_attribute("value") == first["sentences"][0][2]["source"]
  source.clear()
  source.send_keys("the man will not")
  driver.find_element("id", "whatif-prefix").send_keys("le chat")
  beam = driver.find_element("id", "whatif-beam")
  beam.clear()
  beam.send_keys("3")
  driver.find_element("id", "whatif-translate").click()
  shown = wait_for(
    driver, "const e = document.querySelector('.whatif-translation'); return e && e.textContent"
  )
  [want] = translator.translate(["the man will not"], beam_size=3, prefixes=["le chat"])[0]
  assert shown == want.text and shown.startswith("le chat")
  svg = driver.find_element("css selector", '#whatif-result svg.heatmap[data-map="whatif"]')
  assert len(svg.find_elements("css selector", "rect.cell")) == want.attention.size
  assert labels_of(svg, "text.src-label") == ["the", "man", "will", "not", "</s>"]
  rows = want.tokens + (["</s>"] if want.finished else [])
  assert labels_of(svg, "text.out-label") == rows[: want.attention.shape[0]]


def open_what_if(driver, url, text, beam=None):
  """The live page's what-if tab with `text` as the source (and `beam` as the beam size);
  returns the source box."""
  driver.get(f"{url}/explorer")
  assert wait_for(driver, "return document.documentElement.dataset.ready")
  driver.find_element("css selector", 'nav.tabs button[data-tab="whatif"]').click()
  source = driver.find_element("id", "whatif-source")
  source.clear()
  source.send_keys(text)
  if beam is not None:
    box = driver.find_element("id", "whatif-beam")
    box.clear()
    box.send_keys(str(beam))
  return source


def test_live_beam_view_shows_each_step_and_the_winner(driver, live_server):
  translator, url = live_server
  open_what_if(driver, url, "a woman", beam=4)
  driver.find_element("id", "whatif-beam-button").click()
  assert wait_for(driver, "return document.querySelector('table.beam')")
  view = translate.beam_view(translator, "a woman", beam_size=4)
  steps = driver.find_elements("css selector", "table.beam tr[data-step]")
  assert len(steps) == len(view["steps"])
  for row, step in zip(steps, view["steps"], strict=True):
    live = row.find_elements("css selector", ".cand.live .words")
    assert [c.text for c in live] == [" ".join(c["tokens"]) for c in step["live"]]
  [won] = driver.find_elements("css selector", ".cand.won")
  step, kind, index = view["winner"]
  assert (won.get_attribute("data-step"), won.get_attribute("data-kind")) == (str(step), kind)
  tokens = view["translation"]["tokens"] + (["</s>"] if view["translation"]["finished"] else [])
  assert won.find_element("css selector", ".words").text == " ".join(tokens)
  # The winner's path is marked at every step before it.
  assert len(driver.find_elements("css selector", ".cand.live.path")) >= step


def test_live_errors_show_on_the_page_and_the_page_keeps_working(driver, live_server):
  _, url = live_server
  source = open_what_if(driver, url, "日本語のテキスト")
  driver.find_element("id", "whatif-translate").click()
  failed = "const t = document.getElementById('whatif-status').textContent;"
  status = wait_for(driver, failed + " return t.includes('failed') && t")
  assert "source vocabulary" in status and "(sentences[0])" in status
  source.clear()
  source.send_keys("a woman")
  driver.find_element("id", "whatif-translate").click()
  assert wait_for(
    driver, "const e = document.querySelector('.whatif-translation'); return e && e.textContent"
  )
  assert driver.find_element("id", "whatif-status").text == ""

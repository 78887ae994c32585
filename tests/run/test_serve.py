"""The translation service: the batcher that gathers requests, the limits and errors of every
bad request, answers equal to the Python API's, and a server started, used and stopped with
SIGTERM as a user runs it."""

import asyncio
import contextlib
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import httpx
import jax
import numpy as np
import pytest
import uvicorn
from helpers import loopback_server, subprocess_env

import seq2seq
from seq2seq import serve, translate
from seq2seq.serving import capacity


def test_the_batch_shapes_are_a_setting():
  assert serve.batch_size_for(20, 64, (1, 8, 32, 64)) == 32
  assert serve.batch_size_for(5, 64, (64, 1, 8)) == 8  # In any order.
  for sizes in ((), (0, 4)):
    with pytest.raises(ValueError, match="batch_sizes"):
      serve.ServeSettings(batch_sizes=sizes)


def test_settings_refuse_a_max_batch_past_the_largest_batch_size():
  """A gathered batch larger than every compiled shape would compile a new one at request time:
  refused at start-up instead."""
  with pytest.raises(ValueError, match=r"max_batch \(64\) is past the largest of batch_sizes"):
    serve.ServeSettings(max_batch=64, batch_sizes=(1, 8, 32))
  serve.ServeSettings(max_batch=32, batch_sizes=(1, 8, 32))
  serve.ServeSettings(max_batch=20, batch_sizes=(1, 8, 32))


def test_every_batch_is_padded_to_a_compiled_size():
  """With max_batch between two sizes, a full batch (or a larger job, decoded in batches) is
  padded up to the next size, which warm-up compiles: never a shape of its own."""
  sizes = (1, 8, 32)
  assert [serve.batch_size_for(n, 20, sizes) for n in (1, 5, 9, 20, 64)] == [1, 8, 32, 32, 32]


def test_field_names_of_pydantic_locations():
  assert serve.field_name(("sentences", 2)) == "sentences[2]"
  assert serve.field_name(("constraints", 0, 1)) == "constraints[0][1]"
  assert serve.field_name(()) is None


def test_settings_refuse_an_open_address_without_a_token_and_bad_limits():
  with pytest.raises(ValueError, match="give a token"):
    serve.ServeSettings(host="0.0.0.0")
  serve.ServeSettings(host="0.0.0.0", token="s3cret")
  serve.ServeSettings(host="::1")
  with pytest.raises(ValueError, match="max_words"):
    serve.Limits(max_words=0)
  with pytest.raises(ValueError, match="timeout_s"):
    serve.Limits(timeout_s=0)


# The application in this process, on the session's trained tiny run.
@pytest.fixture(scope="module")
def translator(trained):
  return seq2seq.load(trained)


def client_of(translator, **settings):
  """The service and an HTTP client of its application, which answers errors as a server does
  (a 500 rather than the exception) and addresses it as a browser would (Host: 127.0.0.1:8000,
  JSON bodies)."""
  limits = serve.Limits(**settings.pop("limits", {}))
  cfg = serve.ServeSettings(warm_up=False, limits=limits, **settings)
  service = serve.Service(translator, cfg)
  app = serve.create_app(service)
  return service, httpx.AsyncClient(
    transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
    base_url=f"http://127.0.0.1:{cfg.port}",
    headers={"content-type": "application/json"},
  )


def post(translator, path, body, headers=None, **settings):
  """(status, JSON answer) of one request; `body` a dict, or bytes sent as they are. An answer
  that is not JSON fails the test."""

  async def go():
    service, client = client_of(translator, **settings)
    async with client:
      content = body if isinstance(body, bytes) else json.dumps(body).encode()
      r = await client.post(path, content=content, headers=headers)
    service.batcher.close()
    assert r.headers["content-type"] == "application/json", (r.status_code, r.text)
    return r.status_code, r.json()

  return asyncio.run(go())


BAD_REQUESTS = [
  (b"{not json", 400, None),
  (b"[1, 2]", 400, None),
  ({"sentences": []}, 422, "sentences"),
  ({"sentences": "the cat"}, 422, "sentences"),
  ({"sentences": ["the", 3]}, 422, "sentences[1]"),
  ({"sentences": ["the"], "beam": 5}, 422, "beam"),
  ({"sentences": ["the"], "beam_size": 0}, 422, "beam_size"),
  ({"sentences": ["the"], "nbest": 99}, 422, "nbest"),  # More than the beam.
  ({"sentences": ["the"], "sampling": "sample(n=2, temperature=-1)"}, 422, "sampling"),
  ({"sentences": ["the"], "sampling": "sample(n=2, top_p=1.5)"}, 422, "sampling"),
  ({"sentences": ["the"] * 5}, 422, "sentences"),  # Over max_sentences=4.
  ({"sentences": ["the"], "prefixes": ["a", "b"]}, 422, "prefixes"),
  ({"sentences": ["the " * 9]}, 422, "sentences[0]"),  # Over max_words=8.
  ({"sentences": ["the", "日本語のテキスト"]}, 422, "sentences[1]"),  # No word it knows.
  ({"sources": ["the"], "targets": ["a", "b"]}, 422, "targets"),
  ({"sentence": "the", "beam_size": 65}, 422, "beam_size"),  # Over the beam view's 64.
  ({"sentence": "the", "sampling": "sample(n=2)"}, 422, "sampling"),  # Not an option there.
  ({"sentence": "  "}, 422, "sentence"),
  ({"sentence": "the " * 9}, 422, "sentence"),
  ({"sentence": "日本語のテキスト"}, 422, "sentence"),
  ({"sentence": "the", "prefix": 3}, 422, "prefix"),
]


def path_of(body) -> str:
  if isinstance(body, dict) and "sources" in body:
    return "/score"
  return "/beam" if isinstance(body, dict) and "sentence" in body else "/translate"


@pytest.mark.parametrize(("body", "status", "field"), BAD_REQUESTS)
def test_every_bad_request_gets_a_4xx_naming_its_field(translator, body, status, field):
  got, answer = post(translator, path_of(body), body, limits={"max_sentences": 4, "max_words": 8})
  assert (got, answer["field"]) == (status, field), answer
  assert answer["error"]


# What sizes the work, each bounded by a limit the operator sets (tight ones here).
TIGHT = {
  "max_words": 8,
  "max_beam_size": 4,
  "max_samples": 4,
  "max_mbr_candidates": 2,
  "max_len_ratio": 3.0,
}
OVER_A_LIMIT = [
  ({"sentences": ["the"], "beam_size": 5}, "beam_size"),
  ({"sentences": ["the"], "max_len_ratio": 1e6}, "max_len_ratio"),  # Grew a server to 6 GB.
  ({"sentences": ["the"], "sampling": "sample(n=5)"}, "sampling"),
  ({"sentences": ["the"], "mbr": "mbr(utility=chrf)"}, "mbr"),  # Over the run's beam of 3.
  ({"sentences": ["the"], "sampling": "sample(n=3)", "mbr": "mbr(utility=chrf)"}, "mbr"),
  ({"sentences": ["the", "a"], "prefixes": ["", "le " * 9]}, "prefixes[1]"),
  ({"sentences": ["the"], "constraints": [["le chat", "a " * 7]]}, "constraints[0]"),
  ({"sentences": ["the"], "constraints": [[""] * 9]}, "constraints[0]"),  # Each phrase counts.
  ({"sentence": "the", "beam_size": 5}, "beam_size"),
  ({"sentence": "the", "max_len_ratio": 1e6}, "max_len_ratio"),
  ({"sentence": "the", "prefix": "le " * 9}, "prefix"),
]


@pytest.mark.parametrize(("body", "field"), OVER_A_LIMIT)
def test_every_option_that_sizes_the_work_is_bounded(translator, body, field):
  got, answer = post(translator, path_of(body), body, limits=TIGHT)
  assert (got, answer["field"]) == (422, field), answer
  assert "at most" in answer["error"], answer


def test_a_request_may_ask_for_the_runs_own_settings_past_a_limit(translator):
  """The run's decoding is the operator's choice (the live explorer asks for its beam size)."""
  own = translator.decoding.beam_size
  limits = {"max_beam_size": 1, "max_len_ratio": 0.5}
  body = {
    "sentences": ["the"],
    "beam_size": own,
    "max_len_ratio": translator.decoding.max_len_ratio,
  }
  assert post(translator, "/translate", body, limits=limits)[0] == 200
  assert post(translator, "/beam", {"sentence": "the", "beam_size": own}, limits=limits)[0] == 200


@pytest.mark.parametrize(
  ("name", "value"),
  [
    ("max_beam_size", 0),
    ("max_samples", 0),
    ("max_mbr_candidates", 0),
    ("max_len_ratio", 0.0),
    ("max_len_ratio", float("inf")),
    ("max_len_ratio", float("nan")),
  ],
)
def test_the_work_limits_must_be_positive_and_finite(name, value):
  with pytest.raises(ValueError, match=name):
    serve.Limits(**{name: value})


def test_the_work_limits_are_flags_of_the_command_and_in_info(translator):
  flags = ["--max_beam_size=8", "--max_samples=2", "--max_mbr_candidates=6", "--max_len_ratio=1.5"]
  args = serve._parser().parse_args(["--workdir=x", *flags])
  assert (args.max_beam_size, args.max_samples, args.max_mbr_candidates) == (8, 2, 6)
  assert args.max_len_ratio == 1.5
  info = get(translator, "/info", limits={"max_beam_size": 8}).json()
  assert info["limits"]["max_beam_size"] == 8 and "max_len_ratio" in info["limits"]


# Whatever goes wrong, the answer is JSON naming the field.
NOT_TEXT_OR_NUMBERS = [
  ("/beam", b'{"sentence": "the \\ud800"}', "sentence"),  # A lone surrogate.
  ("/translate", b'{"sentences": ["the \\ud800"], "replace_unk": true}', "sentences[0]"),
  ("/translate", b'{"sentences": ["the"], "prefixes": ["\\udfff"]}', "prefixes[0]"),
  ("/translate", b'{"sentences": ["the"], "max_len_ratio": Infinity}', "max_len_ratio"),
  ("/translate", b'{"sentences": ["the"], "max_len_ratio": 1e308}', "max_len_ratio"),
  ("/translate", b'{"sentences": ["the"], "max_len_ratio": NaN}', "max_len_ratio"),
  ("/beam", b'{"sentence": "the", "max_len_ratio": Infinity}', "max_len_ratio"),
  ("/translate", b'{"sentences": ["the"], "length_penalty": "power(alpha=inf)"}', "length_penalty"),
  ("/beam", b'{"sentence": "the", "length_penalty": "gnmt(alpha=inf)"}', "length_penalty"),
]


@pytest.mark.parametrize(("path", "body", "field"), NOT_TEXT_OR_NUMBERS)
def test_text_that_is_not_unicode_and_numbers_that_are_not_finite_get_a_422(
  translator, path, body, field
):
  got, answer = post(translator, path, body)
  assert (got, answer["field"]) == (422, field), answer


def test_an_unexpected_error_is_a_json_500(translator, monkeypatch):
  def broken(*args, **kwargs):
    raise RuntimeError("boom")

  monkeypatch.setattr(serve.translate, "translate_lines", broken)
  got, answer = post(translator, "/translate", {"sentences": ["the"]})
  assert (got, answer["field"]) == (500, None) and "RuntimeError: boom" in answer["error"], answer


def test_an_unknown_route_or_method_is_a_json_error(translator):
  for path, status in (("/nope", 404), ("/translate", 405)):
    r = get(translator, path)
    assert (r.status_code, r.json()["field"]) == (status, None), r.text


def test_the_explorer_of_a_split_being_written_answers_503_in_json(
  translator, trained, tmp_path, monkeypatch
):
  """`--mode=eval` writes sentences.jsonl line by line: its last line may be half there."""
  workdir = tmp_path / "run"
  shutil.copytree(trained, workdir, ignore=shutil.ignore_patterns("checkpoints", "best"))
  sentences = workdir / "eval" / "test" / "sentences.jsonl"
  text = sentences.read_text()
  sentences.write_text(text[: text.index("\n") + 9])
  monkeypatch.setattr(translator, "workdir", workdir)
  r = get(translator, "/explorer?split=test")
  assert r.headers["content-type"] == "application/json", r.text
  assert (r.status_code, r.json()["field"]) == (503, "split")
  assert int(r.headers["retry-after"]) > 0


def test_a_body_over_the_byte_limit_is_refused_unread(translator):
  body = {"sentences": ["the " * 50]}
  got, answer = post(translator, "/translate", body, limits={"max_request_bytes": 100})
  assert got == 413 and "100 bytes" in answer["error"]


def test_answers_equal_the_python_api(translator, trained):
  sentences = ["the man will not", "a woman", "they"]
  body = {"sentences": sentences, "beam_size": 3, "nbest": 2, "attention": True}
  got, answer = post(translator, "/translate", body)
  assert got == 200
  want = translator.translate(sentences, beam_size=3, nbest=2)
  for served, hyps in zip(answer["translations"], want, strict=True):
    assert [h["text"] for h in served] == [h.text for h in hyps]
    np.testing.assert_allclose([h["score"] for h in served], [h.score for h in hyps], rtol=1e-5)
    for h, w in zip(served, hyps, strict=True):
      np.testing.assert_allclose(h["attention"], w.attention, atol=1e-4)
  texts = [hyps[0].text for hyps in want]
  got, scored = post(translator, "/score", {"sources": sentences, "targets": texts})
  assert got == 200
  np.testing.assert_allclose(
    [s["score"] for s in scored["scores"]], [hyps[0].score for hyps in want], rtol=1e-4
  )


def test_concurrent_requests_share_batches_and_get_their_own_answers(translator):
  sentences = ["the man will not", "a woman", "they", "the", "and the man", "she will"]
  alone = [hyps[0].text for hyps in translator.translate(sentences)]

  async def go():
    service, client = client_of(translator, wait_ms=200.0)
    async with client:
      answers = await asyncio.gather(
        *(client.post("/translate", json={"sentences": [s]}) for s in sentences)
      )
    service.batcher.close()
    return service.batcher.stats.sizes, [a.json()["translations"][0][0]["text"] for a in answers]

  sizes, texts = asyncio.run(go())
  assert texts == alone
  assert sum(k * n for k, n in sizes.items()) == len(sentences) and max(sizes) > 1, sizes


def test_the_beam_view_answers_as_the_python_api(translator):
  body = {"sentence": "the man will not", "prefix": "le", "beam_size": 3}
  got, answer = post(translator, "/beam", body)
  assert got == 200
  want = translate.beam_view(translator, "the man will not", prefix="le", beam_size=3)
  assert answer["beam"] == json.loads(json.dumps(want))


def test_a_guide_outside_the_target_vocabulary_gets_a_422_with_the_reason(translator):
  """A prefix word the target vocabulary lacks would be forced as <unk>: refused, as a
  constraint phrase with such a word is."""
  cases = [
    ("/translate", {"sentences": ["the man", "they"], "prefixes": ["", "le zzzqqq"]}, "line 2"),
    ("/translate", {"sentences": ["the man"], "constraints": [["zzzqqq"]]}, "line 1"),
    ("/beam", {"sentence": "the man", "prefix": "zzzqqq"}, "line 1"),
  ]
  for path, body, line in cases:
    got, answer = post(translator, path, body)
    assert got == 422, answer
    assert line in answer["error"] and "outside the target vocabulary" in answer["error"], answer


def get(translator, path, **settings):
  async def go():
    service, client = client_of(translator, **settings)
    async with client:
      r = await client.get(path)
    service.batcher.close()
    return r

  return asyncio.run(go())


def test_the_explorer_page_is_served_live(translator):
  page = get(translator, "/explorer")
  assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
  assert "connect-src 'self'" in page.text and '"live":{"beam_size":' in page.text
  assert "sentence 0" not in page.text  # The page is built by its script, from the data.
  assert get(translator, "/explorer?split=test").status_code == 200
  missing = get(translator, "/explorer?split=nope")
  assert (missing.status_code, missing.json()["field"]) == (404, "split")
  home = get(translator, "/")
  assert home.status_code == 307 and home.headers["location"] == "/explorer"


def test_a_body_that_never_arrives_gets_a_408_within_the_body_timeout(translator):
  """A client that sends the start of its body and then nothing holds the request for
  `Limits.body_timeout_s`, not for as long as it likes."""
  import time

  async def half_sent():
    yield b'{"sentences": ['
    await asyncio.sleep(60)
    yield b"]}"

  async def go():
    service, client = client_of(translator, limits={"body_timeout_s": 0.5})
    async with client:
      began = time.monotonic()
      r = await client.post("/translate", content=half_sent())
      took = time.monotonic() - began
    service.batcher.close()
    return r, took

  r, took = asyncio.run(go())
  assert (r.status_code, r.json()["field"]) == (408, None) and took < 10, (r.text, took)
  assert "did not arrive within 0.5 s" in r.json()["error"]


def test_a_service_whose_workdir_now_holds_another_run_says_so(translator, trained, tmp_path):
  """The workdir's config.json is rewritten after the model was loaded (a new run trained
  there): /info says so, and the explorer, whose files describe that other run, answers 409."""
  import copy
  import shutil

  moved = copy.copy(translator)  # The same model, served from a copy of the run's files.
  moved.workdir = tmp_path / "run"
  shutil.copytree(trained / "eval", moved.workdir / "eval")
  shutil.copy(trained / "config.json", moved.workdir / "config.json")

  async def go():
    service, client = client_of(moved)
    async with client:
      before = (await client.get("/info")).json(), (await client.get("/explorer")).status_code
      config = moved.workdir / "config.json"
      config.write_text(config.read_text() + "\n")
      after = (await client.get("/info")).json(), await client.get("/explorer")
    service.batcher.close()
    return before, after

  (info, page), (info_after, page_after) = asyncio.run(go())
  assert (info["workdir_replaced"], page) == (False, 200)
  assert info_after["workdir_replaced"] and info_after["step"] == info["step"]
  assert page_after.status_code == 409
  assert "restart the service" in page_after.json()["error"]


def test_a_static_report_asks_no_server(trained):
  """Written to disk, the report's policy allows no request at all."""
  from seq2seq import explorer

  html = (trained / "eval" / "test" / explorer.REPORT).read_text()
  assert "connect-src" not in html and '"live":{' not in html


def test_with_a_token_the_explorer_signs_in_once_and_the_token_never_goes_in_the_address(
  translator,
):
  """A browser gets a sign-in form (401) that posts the token once; the session cookie it gets
  back (HttpOnly, SameSite=Strict, not the token itself) then opens the explorer and its
  requests. A token in the address is refused, right or wrong, so none ends up in a log."""

  async def go():
    async with served(translator, host="0.0.0.0", token="s3cret") as (_, client):
      form = await client.get("/explorer")
      in_address = await client.get("/explorer?token=s3cret")
      wrong = await client.post("/session", json={"token": "no"})
      assert "set-cookie" not in wrong.headers and client.cookies.get("seq2seq_session") is None
      right = await client.post("/session", json={"token": "s3cret"})
      page = await client.get("/explorer")
      asked = await client.post("/translate", json={"sentences": ["the"]})
      return form, in_address, wrong, right, page, asked

  form, in_address, wrong, right, page, asked = asyncio.run(go())
  assert form.status_code == 401 and 'fetch("/session"' in form.text
  assert "connect-src 'self'" in form.headers["content-security-policy"]
  assert (in_address.status_code, in_address.json()["field"]) == (401, "token")
  assert "never goes in the address" in in_address.json()["error"]
  assert wrong.status_code == 401
  cookie = right.headers["set-cookie"]
  assert right.status_code == 200 and "HttpOnly" in cookie and "SameSite=strict" in cookie
  assert "s3cret" not in cookie
  assert page.status_code == 200 and '"live":{' in page.text
  assert asked.status_code == 200


def test_a_token_guards_every_endpoint_but_health(translator):
  async def go():
    service, client = client_of(translator, host="0.0.0.0", token="s3cret")
    async with client:
      body = {"sentences": ["the"]}
      codes = [
        (await client.post("/translate", json=body)).status_code,
        (
          await client.post("/translate", json=body, headers={"authorization": "Bearer no"})
        ).status_code,
        (
          await client.post("/translate", json=body, headers={"authorization": "Bearer s3cret"})
        ).status_code,
        (await client.get("/info")).status_code,
        (await client.get("/metrics")).status_code,
        (await client.post("/translator/translate", json=[{"src": "the"}])).status_code,
        (await client.get("/health")).status_code,
      ]
    service.batcher.close()
    return codes

  assert asyncio.run(go()) == [401, 401, 200, 401, 401, 401, 200]


def test_post_bodies_must_be_declared_json(translator):
  """A web page may send text/plain or a form to any address without asking (no CORS
  preflight); a JSON body to another origin needs the preflight, which the service never
  grants."""
  body = {"sentences": ["the"]}
  for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data", ""):
    got, answer = post(translator, "/translate", body, headers={"content-type": kind})
    assert (got, answer["field"]) == (415, "Content-Type"), (kind, answer)
  json_utf8 = {"content-type": "application/json; charset=utf-8"}
  assert post(translator, "/translate", body, headers=json_utf8)[0] == 200


def statuses(translator, hosts, path="/info", **settings):
  """The status of a request to `path` with each Host header of `hosts`."""

  async def go():
    service, client = client_of(translator, **settings)
    token = settings.get("token", "")
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with client:
      codes = []
      for host in hosts:
        r = await client.get(path, headers={**headers, "host": host})
        codes.append(r.status_code)
        if r.status_code != 200:
          assert r.json()["field"] == "Host", r.text
    service.batcher.close()
    return codes

  return asyncio.run(go())


def test_a_loopback_service_answers_only_its_own_names_and_port(translator):
  """DNS rebinding: a page of evil.example whose name then points at 127.0.0.1 reaches the
  service as the same origin, but its requests say Host: evil.example:8000."""
  own = ["127.0.0.1:8000", "localhost:8000", "LocalHost:8000", "[::1]:8000"]
  others = ["evil.example:8000", "127.0.0.1:9000", "127.0.0.1", "evil.example", "[::2]:8000"]
  for path in ("/info", "/explorer", "/health"):
    assert statuses(translator, own + others, path) == [200] * 4 + [403] * 5, path
  got, answer = post(translator, "/translate", {"sentences": ["the"]}, headers={"host": "a.b:8000"})
  assert (got, answer["field"]) == (403, "Host")
  assert statuses(translator, ["[::1]:8000", "evil.example:8000"], host="::1") == [200, 403]


def test_beyond_loopback_the_token_guards_and_any_host_name_is_answered(translator):
  settings = {"host": "0.0.0.0", "token": "s3cret", "port": 9000}
  assert statuses(translator, ["translate.example.org", "10.0.0.5:9000"], **settings) == [200, 200]


def test_a_stop_signal_turns_health_and_new_requests_to_503(translator):
  async def go():
    service, client = client_of(translator)
    server = serve.StoppingServer(uvicorn.Config(serve.create_app(service)), service)
    async with client:
      before = (await client.get("/health")).status_code
      server.handle_exit(signal.SIGTERM, None)
      after = [
        (await client.get("/health")).status_code,
        (await client.post("/translate", json={"sentences": ["the"]})).status_code,
      ]
    service.batcher.close()
    return before, after, server.should_exit

  assert asyncio.run(go()) == (200, [503, 503], True)


def test_info_names_the_run(translator):
  async def go():
    service, client = client_of(translator)
    async with client:
      info = (await client.get("/info")).json()
      schema = (await client.get("/openapi.json")).json()
    service.batcher.close()
    return info, schema

  info, schema = asyncio.run(go())
  assert info["step"] == 20 and info["vocabulary"]["source"] == translator.src_tok.size
  assert {"/translate", "/score", "/beam", "/explorer", "/health", "/info"} <= set(schema["paths"])
  assert {"/metrics", "/session", "/translator/translate"} <= set(schema["paths"])
  # Without a warm-up to time a batch, the queue holds a batch per second of the timeout.
  assert info["max_queue"] == 60 * 64


def traces_of(fn) -> int:
  """How many programs JAX traced (a jit cache miss) while `fn` ran."""
  events = []
  listener = lambda name, *_, **__: events.append(name)
  jax.monitoring.register_event_duration_secs_listener(listener)
  try:
    fn()
  finally:
    jax.monitoring.unregister_event_duration_listener(listener)
  return events.count("/jax/core/compile/jaxpr_trace_duration")


def test_after_warm_up_requests_of_the_warmed_shapes_compile_nothing(translator):
  service = serve.Service(translator, serve.ServeSettings(warm_up=False, max_batch=4))
  # Beam sizes 1 and the run's 3, batch sizes 1 and 4 (those up to max_batch), the first length
  # bucket (configs/tiny.py pads sources to 24 tokens).
  assert service.warm_up(lengths=[5]) == 4
  # It timed a full batch, and the queue holds what is decoded in full batches within the timeout.
  assert service.capacity.batch_s < capacity.UNTIMED_BATCH_S
  assert service.batcher.max_waiting == int(60.0 / service.capacity.batch_s) * 4
  key, items = service.check_translate(serve.TranslateRequest(sentences=["the man will not"] * 3))
  assert traces_of(lambda: service.batcher.submit(key, items).result(60)) == 0
  greedy = serve.TranslateRequest(sentences=["a woman will"], beam_size=1)
  key, items = service.check_translate(greedy)
  assert traces_of(lambda: service.batcher.submit(key, items).result(60)) == 0
  # 31 tokens, past the warmed bucket, compile (so the counts above can fail).
  key, items = service.check_translate(serve.TranslateRequest(sentences=["the man " * 15]))
  assert traces_of(lambda: service.batcher.submit(key, items).result(60)) > 0
  service.batcher.close()


@contextlib.asynccontextmanager
async def served(translator, **settings):
  """(service, HTTP client) of the service on a loopback port (`helpers.loopback_server`)."""
  with loopback_server(translator, **settings) as (service, url):
    headers = {"content-type": "application/json"}
    async with httpx.AsyncClient(base_url=url, timeout=60, headers=headers) as client:
      yield service, client


def test_the_opennmt_route_answers_a_client_written_to_its_format(translator):
  """A client as OpenNMT-py's REST documentation describes one: a list of {"src", "id"}, the
  answer a list per rank of the n best holding each input's {"src", "tgt", "n_best",
  "pred_score"} (and "align" where the model gives links), in input order."""
  sources = ["the man will not", "a woman"]
  body = [{"src": s, "id": 100} for s in sources]
  bad_bodies = (
    ({"src": "the"}, None),
    ([], None),
    ([{"src": "the"}, {"text": "a"}], "[1].src"),
    ([{"src": "the", "id": "en-fr"}], "[0].id"),
  )
  with loopback_server(translator) as (_, url):
    status, out = request(f"{url}/translator/translate", json.dumps(body).encode())
    refused = [
      request(f"{url}/translator/translate", json.dumps(b).encode()) for b, _ in bad_bodies
    ]
  assert status == 200, out
  best = [hyps[0] for hyps in translator.translate(sources)]
  assert [entry["tgt"] for entry in out[0]] == [h.text for h in best]
  assert [entry["src"] for entry in out[0]] == sources and out[0][0]["n_best"] == len(out) == 1
  assert [entry["pred_score"] for entry in out[0]] == pytest.approx([h.score for h in best])
  links = out[0][0]["align"][0]
  assert re.fullmatch(r"(\d+-\d+( \d+-\d+)*)?", links), links
  for (status, answer), (_, field) in zip(refused, bad_bodies, strict=True):
    assert (status, answer["field"]) == (400, field), answer


def test_metrics_count_requests_batches_and_the_queue_in_prometheus_text(translator):
  async def go():
    async with served(translator) as (_, client):
      await client.post("/translate", json={"sentences": ["the man", "a woman"]})
      await client.post("/translate", json={"sentences": []})
      await client.get("/no/such/page")
      return await client.get("/metrics")

  r = asyncio.run(go())
  assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
  samples = {}
  for line in r.text.splitlines():
    if not line.startswith("#"):
      name, value = line.rsplit(" ", 1)
      samples[name] = float(value)
  assert samples['seq2seq_requests_total{route="/translate",status="200"}'] == 1
  assert samples['seq2seq_requests_total{route="/translate",status="422"}'] == 1
  assert samples['seq2seq_requests_total{route="other",status="404"}'] == 1
  assert samples['seq2seq_batch_sentences_bucket{le="4"}'] == 1
  assert samples["seq2seq_batch_sentences_count"] == 1
  assert samples["seq2seq_sentences_total"] == 2 and samples["seq2seq_decode_seconds_total"] > 0
  assert samples["seq2seq_queue_sentences"] == 0 and samples["seq2seq_queue_limit_sentences"] > 0
  assert "# TYPE seq2seq_requests_total counter" in r.text


def test_a_burst_past_the_queue_bound_gets_429_at_once_with_retry_after(translator):
  """The decoder is held on a first request; of a burst of 6 one-sentence requests, the 2 the
  queue holds wait and are answered, the other 4 are refused at once with 429 and Retry-After,
  and /health and /metrics show the queue while it is full."""
  with loopback_server(translator, max_batch=1, batch_sizes=(1,), max_queue=2) as (service, url):
    gate, held = threading.Event(), threading.Event()
    run = service.batcher._run_batch

    def held_first(key, items):
      held.set()
      assert gate.wait(60)
      return run(key, items)

    service.batcher._run_batch = held_first

    async def go():
      async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        body = {"sentences": ["the man"]}
        first = asyncio.create_task(client.post("/translate", json=body))
        await asyncio.to_thread(held.wait, 30)
        burst = [asyncio.create_task(client.post("/translate", json=body)) for _ in range(6)]
        while service.batcher.waiting()[1] < 2 or sum(t.done() for t in burst) < 4:
          await asyncio.sleep(0.02)
        refused = [t.result() for t in burst if t.done()]
        health = (await client.get("/health")).json()
        gauges = (await client.get("/metrics")).text
        gate.set()
        waited = [await t for t in burst]
        return await first, refused, health, gauges, waited

    first, refused, health, gauges, answers = asyncio.run(go())
  assert first.status_code == 200
  assert [r.status_code for r in refused] == [429] * 4
  assert all(int(r.headers["retry-after"]) >= 1 for r in refused)
  assert "the queue holds at most 2" in refused[0].json()["error"]
  assert health["queue"] == {"requests": 2, "sentences": 2, "max_sentences": 2}
  assert "seq2seq_queue_sentences 2" in gauges
  assert 'seq2seq_requests_total{route="/translate",status="429"} 4' in gauges
  assert sorted(r.status_code for r in answers) == [200, 200, 429, 429, 429, 429]


def test_new_option_sets_past_the_bound_clear_the_compiled_programs(translator):
  """Each new length penalty compiles a decoding program JAX would keep for good: past
  max_option_sets (2) combinations the service clears them, so 4 combinations leave at most 2
  programs of theirs, not 4; the run's own settings are not counted."""
  from seq2seq.decoding import decode

  service = serve.Service(translator, serve.ServeSettings(warm_up=False, max_option_sets=2))
  own = serve.TranslateRequest(sentences=["the man"], beam_size=translator.decoding.beam_size)
  service.batcher.submit(*service.check_translate(own)).result(60)
  before = decode.jit_decode._cache_size()
  for alpha in (0.1, 0.2, 0.3, 0.4):
    req = serve.TranslateRequest(sentences=["the man"], length_penalty=f"power(alpha={alpha})")
    service.batcher.submit(*service.check_translate(req)).result(60)
  kept = decode.jit_decode._cache_size()
  service.batcher.close()
  assert before >= 1 and service.capacity.program_clears == 1 and kept <= 2, (before, kept)
  assert list(service.capacity.option_sets) == [
    ("translate", (("length_penalty", f"power(alpha={a})"),), 1, ()) for a in (0.3, 0.4)
  ]


def test_a_request_whose_decoding_would_outlast_the_timeout_is_refused_before_it_starts(
  translator,
):
  """Once a batch is timed, a request's decoding is estimated from it (batches, width, longest
  sentence): one past the timeout gets 422 at once instead of holding the decoder past its 504."""
  service = serve.Service(translator, serve.ServeSettings(warm_up=False, max_batch=4))
  service.capacity.timed(2.0, 4, 1)  # A batch of 4 four-word sentences, greedy, in 2 s.
  assert service.capacity.estimated_s(["the man will not"] * 4, 1) == pytest.approx(2.0)
  assert service.capacity.estimated_s(["the man will not"] * 8, 8) == pytest.approx(32.0)
  cheap = serve.TranslateRequest(sentences=["the man"] * 4, beam_size=4)
  service.check_translate(cheap)
  costly = serve.TranslateRequest(sentences=["the man will not"] * 64, beam_size=8)
  with pytest.raises(serve.RequestError, match="past the 60 s this server answers within"):
    service.check_translate(costly)
  service.batcher.close()


def test_work_of_a_client_that_closed_its_connection_is_dropped(translator):
  """While the decoder is held on one request, a client sends another and hangs up: its
  sentence is never decoded, and /metrics counts a 499."""
  with loopback_server(translator) as (service, url):
    gate, held = threading.Event(), threading.Event()
    run, seen = service.batcher._run_batch, []

    def held_first(key, items):
      seen.append(items)
      held.set()
      assert gate.wait(60)
      return run(key, items)

    service.batcher._run_batch = held_first
    first = threading.Thread(
      target=request, args=(f"{url}/translate", {"sentences": ["the man"]}), daemon=True
    )
    first.start()
    assert held.wait(30)
    port = int(url.rsplit(":", 1)[1])
    body = json.dumps({"sentences": ["a woman will"]}).encode()
    with socket.create_connection(("127.0.0.1", port)) as sock:
      head = (
        f"POST /translate HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
      )
      sock.sendall(head.encode() + body)
      deadline = time.monotonic() + 30
      while service.batcher.waiting()[0] < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    deadline = time.monotonic() + 30  # The socket is closed: the service notices.
    while "499" not in service.metrics_text() and time.monotonic() < deadline:
      time.sleep(0.05)
    gate.set()
    first.join(60)
    text = service.metrics_text()
  assert 'seq2seq_requests_total{route="/translate",status="499"} 1' in text
  assert all(sentence != "a woman will" for items in seen for sentence, _, _ in items), seen


# The server as a user starts it.
def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def request(url, body=None, timeout=30, headers=None):
  """(status, JSON answer); `body` a dict sent as JSON, or bytes sent as they are."""
  data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
  headers = {"Content-Type": "application/json", **(headers or {})}
  try:
    with urllib.request.urlopen(urllib.request.Request(url, data, headers), timeout=timeout) as r:
      return r.status, json.loads(r.read())
  except urllib.error.HTTPError as e:
    return e.code, json.loads(e.read())


@pytest.mark.slow
def test_the_command_serves_answers_and_stops_on_sigterm(trained):
  port = free_port()
  cmd = [sys.executable, "-m", "seq2seq.serve", f"--workdir={trained}", f"--port={port}"]
  cmd += ["--max_words=12"]  # Warm-up compiles lengths up to 12 words.
  proc = subprocess.Popen(
    cmd, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
  )
  url = f"http://127.0.0.1:{port}"
  try:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
      try:
        if request(f"{url}/health", timeout=2)[0] == 200:
          break
      except OSError:
        time.sleep(0.5)
      assert proc.poll() is None, proc.stdout.read().decode()
    status, answer = request(f"{url}/translate", {"sentences": ["the man", "a woman"]})
    assert status == 200 and len(answer["translations"]) == 2
    assert request(f"{url}/translate", {"sentences": ["the " * 13]})[0] == 422
    # The probes of #94, each of which once grew the server, crashed a request or reached it
    # from any web page.
    probes = [
      ("/translate", {"sentences": ["the cat"], "max_len_ratio": 1e6}, {}, 422),
      ("/translate", b'{"sentences": ["the"], "max_len_ratio": Infinity}', {}, 422),
      ("/beam", b'{"sentence": "the \\ud800"}', {}, 422),
      ("/translate", {"sentences": ["the"]}, {"Content-Type": "text/plain"}, 415),
      ("/translate", {"sentences": ["the"]}, {"Host": f"evil.example:{port}"}, 403),
    ]
    for path, body, headers, status in probes:
      got, answer = request(f"{url}{path}", body, headers=headers)
      assert (got, bool(answer["error"])) == (status, True), (body, answer)
    assert request(f"{url}/health")[0] == 200  # Alive after the bad requests.
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=60)[0].decode()
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == 0, out
  assert "compiled" in out and "serving on" in out
  assert "loading the best checkpoint" in out and "evaluating" not in out


def test_the_command_refuses_an_open_address_without_a_token(trained):
  cmd = [sys.executable, "-m", "seq2seq.serve", f"--workdir={trained}", "--host=0.0.0.0"]
  proc = subprocess.run(
    cmd,
    env={**subprocess_env(), "SEQ2SEQ_SERVE_TOKEN": ""},
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1].startswith("error: --host=0.0.0.0 is reachable")


def test_the_command_refuses_batch_sizes_that_do_not_cover_max_batch(tmp_path):
  """One error line at start-up, before any run is read (the workdir holds none)."""
  cmd = [sys.executable, "-m", "seq2seq.serve", f"--workdir={tmp_path}"]
  cmd += ["--max_batch=100"]  # Past the default sizes' largest, 64.
  proc = subprocess.run(cmd, env=subprocess_env(), capture_output=True, text=True, timeout=120)
  assert proc.returncode == 1, proc.stderr
  assert proc.stderr.strip().splitlines() == [
    "error: serve max_batch (100) is past the largest of batch_sizes (64): add a size of at least "
    "100 to --batch_sizes, or lower --max_batch"
  ]


def test_the_command_refuses_a_folder_without_a_run(tmp_path):
  cmd = [sys.executable, "-m", "seq2seq.serve", f"--workdir={tmp_path}"]
  proc = subprocess.run(cmd, env=subprocess_env(), capture_output=True, text=True, timeout=120)
  assert proc.returncode == 1, proc.stderr
  assert proc.stderr.strip().splitlines() == [
    f"error: {tmp_path}/config.json does not exist: {tmp_path} holds no run (train first)"
  ]


def test_main_py_names_the_service_command_for_its_old_serve_mode(tmp_path):
  """`main.py --mode=serve` (the service's command before it had its own) is refused in one
  line that gives the command doing the same now, its flags without the serve_ prefix."""
  cmd = [sys.executable, "main.py", "--mode=serve", f"--workdir={tmp_path}", "--port=9000"]
  cmd += ["--serve_max_words=12", "--noserve_warm_up"]
  proc = subprocess.run(cmd, env=subprocess_env(), capture_output=True, text=True, timeout=120)
  assert proc.returncode == 1, proc.stderr
  assert proc.stderr.strip().splitlines() == [
    "error: the service has a command of its own: python -m seq2seq.serve "
    f"--workdir={tmp_path} --port=9000 --max_words=12 --no_warm_up"
  ]


def test_the_batch_sizes_flag_takes_positive_whole_numbers(capsys):
  with pytest.raises(SystemExit):
    serve.main(["--workdir=x", "--batch_sizes=1,0"])
  assert "positive whole numbers, comma-separated" in capsys.readouterr().err


def test_loading_a_run_to_serve_says_it_loads(trained, capsys):
  """What serving prints while it reads the run's checkpoint (`seq2seq.load`, as the service
  does): that it loads it, not that it evaluates it."""
  seq2seq.load(trained)
  err = capsys.readouterr().err
  assert re.search(r"^loading the \w+ checkpoint \(step \d+\)$", err, re.M), err
  assert "evaluating" not in err


@pytest.mark.slow
def test_serve_bench_smoke(trained, tmp_path):
  from experiments import serve_bench

  words = ["the", "a", "man", "woman", "will", "not", "they", "and"]
  rng = np.random.default_rng(0)
  lines = [" ".join(rng.choice(words, size=rng.integers(2, 8))) for _ in range(24)]
  (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
  args = ["--run", str(trained), "--input", str(tmp_path / "in.txt"), "--out", str(tmp_path)]
  args += ["--requests=24", "--clients=1,4", "--malformed=16", "--soak=48", "--max_words=10"]
  record = serve_bench.main(args)
  assert [r["correct"] for r in record["load"]] == [24, 24]
  f = record["faults"]
  assert (f["valid_answered_right"], f["malformed_refused_4xx"]) == (16, 16)
  assert f["slow_client_answered_right"] and f["healthy_after"]
  assert record["soak"]["answered_right"] == 48
  t = record["sigterm"]
  assert t["exit_status"] == 0 and t["other"] == 0 and t["answered_right"] + t["refused"] == 24
  assert (tmp_path / "serve_bench.md").read_text().startswith("# The translation service")

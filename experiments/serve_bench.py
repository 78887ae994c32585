"""The translation service (`seq2seq.serve`) under load and faults, against offline batch decoding
of the same sentences on the same machine in the same run.

    python -m experiments.serve_bench --run RUN --input SOURCES.txt \
        --out experiments/results/serve_bench [--requests 512] [--clients 1,8,64] \
        [--malformed 1000] [--soak 10000]

Greedy decoding throughout (`beam_size: 1` in every request). In order:

1. offline: `translate_lines` over the first `--requests` sentences in batches of 64, in this
   process, once to compile and once timed (sentences per second);
2. the server, started as a user starts it (`python -m seq2seq.serve`, warm-up on) on a free
   loopback port; for each client count C, C concurrent clients send one sentence per request
   until `--requests` are answered: sentences per second, p50/p99 latency, the ratio to offline,
   and whether every answer equals its offline translation;
3. faults: `--malformed` bad requests of eight kinds mixed at random among as many valid ones
   (every valid answer must be right, every bad one a 4xx); clients that disconnect mid-request;
   a slow client that sends its body in pieces; then /health;
4. a soak of `--soak` requests from 16 clients, the server's resident memory read every 10 %;
5. SIGTERM while 64 clients send: every request answered correctly or refused (connection
   refused or 503), and the exit status and seconds to exit.

Every loop is bounded; traffic goes to 127.0.0.1 only. Writes OUT/serve_bench.json (every
figure, the CPU, its vector instruction sets and the load average) and OUT/serve_bench.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from experiments.lib import reports
from experiments.lib.pages.serve_bench import page

JSON = {"Content-Type": "application/json"}  # The service refuses other bodies (415).
MALFORMED_KINDS = (
  "not json",
  "not an object",
  "empty list",
  "wrong type",
  "unknown option",
  "too many words",
  "bad option value",
  "too many sentences",
)


def malformed(kind: str, rng: random.Random) -> bytes:
  """A request body of `kind` that the server must refuse with a 4xx."""
  word = rng.choice(["the", "a", "man"])
  body: Any = {
    "not an object": [1, 2],
    "empty list": {"sentences": []},
    "wrong type": {"sentences": [3]},
    "unknown option": {"sentences": [word], "beam": 2},
    "too many words": {"sentences": [" ".join([word] * 1000)]},
    "bad option value": {"sentences": [word], "sampling": "sample(n=2, temperature=-1)"},
    "too many sentences": {"sentences": [word] * 10_000},
  }.get(kind)
  if body is None:
    return b'{"sentences": ["' + word.encode()
  return json.dumps(body).encode()


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def cpu_seconds(pid: int | None = None) -> float:
  """User plus system CPU seconds used so far by process `pid` (this process when None)."""
  if pid is None:
    return time.process_time()
  fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime.


def rss_mib(pid: int) -> float:
  for line in Path(f"/proc/{pid}/status").read_text().splitlines():
    if line.startswith("VmRSS:"):
      return int(line.split()[1]) / 1024
  return float("nan")


class Server:
  """`python -m seq2seq.serve` on `run` as a child process on a free loopback port."""

  def __init__(self, run: Path, extra: Sequence[str] = ()):
    self.port = free_port()
    self.url = f"http://127.0.0.1:{self.port}"
    cmd = [sys.executable, "-m", "seq2seq.serve", f"--workdir={run}", f"--port={self.port}"]
    self.proc = subprocess.Popen([*cmd, *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    self.started_s = self._wait_healthy(timeout_s=900)

  def _wait_healthy(self, timeout_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
      if self.proc.poll() is not None:
        raise SystemExit(f"error: the server exited:\n{self.proc.stdout.read().decode()}")
      try:
        if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
          return time.monotonic() - start
      except httpx.HTTPError:
        time.sleep(0.5)
    raise SystemExit(f"error: the server did not answer /health within {timeout_s} s")

  def stop(self, timeout_s: float = 120) -> dict[str, Any]:
    start = time.monotonic()
    self.proc.send_signal(signal.SIGTERM)
    try:
      self.proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
      self.proc.kill()
      self.proc.wait()
      return {"exit_status": None, "hung": True, "exit_s": timeout_s}
    return {"exit_status": self.proc.returncode, "hung": False, "exit_s": time.monotonic() - start}


async def drive(url: str, bodies: list[bytes], clients: int, timeout_s: float = 120):
  """Sends `bodies` from `clients` concurrent clients (each one request at a time); returns
  per body (status or the error's name, the JSON answer or None, seconds), and the wall seconds."""
  out: list[Any] = [None] * len(bodies)
  queue = list(enumerate(bodies))[::-1]
  limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

  async def client(http: httpx.AsyncClient):
    while queue:
      i, body = queue.pop()
      start = time.monotonic()
      try:
        r = await http.post(f"{url}/translate", content=body, timeout=timeout_s)
        answer = (
          r.json() if r.headers.get("content-type", "").startswith("application/json") else None
        )
        out[i] = (r.status_code, answer, time.monotonic() - start)
      except httpx.HTTPError as e:
        out[i] = (type(e).__name__, None, time.monotonic() - start)

  start = time.monotonic()
  async with httpx.AsyncClient(limits=limits, headers=JSON) as http:
    await asyncio.gather(*(client(http) for _ in range(clients)))
  return out, time.monotonic() - start


async def drive_lean(url: str, bodies: list[bytes], clients: int, timeout_s: float = 120):
  """`drive` with a lean client: each of the `clients` keeps one HTTP/1.1 connection open and
  writes and reads its requests over it with asyncio streams, which costs the machine a fraction
  of httpx's CPU per request (the clients share the server's cores; see `load_rows`). Same
  results as `drive`; a request that fails is recorded by the error's name and its client opens
  a new connection."""
  host, port = url.removeprefix("http://").split(":")
  out: list[Any] = [None] * len(bodies)
  queue = list(enumerate(bodies))[::-1]

  async def exchange(reader, writer, body: bytes):
    writer.write(
      b"POST /translate HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
      b"Content-Length: %d\r\n\r\n%s" % (host.encode(), port.encode(), len(body), body)
    )
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    fields = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    size = int({k.lower(): v for k, v in fields.items()}["content-length"])
    return status, json.loads(await reader.readexactly(size))

  async def client():
    connection = None
    while queue:
      i, body = queue.pop()
      start = time.monotonic()
      try:
        if connection is None:
          connection = await asyncio.open_connection(host, int(port))
        status, answer = await asyncio.wait_for(exchange(*connection, body), timeout_s)
        out[i] = (status, answer, time.monotonic() - start)
      except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError, KeyError) as e:
        out[i] = (type(e).__name__, None, time.monotonic() - start)
        if connection is not None:
          connection[1].close()
        connection = None
    if connection is not None:
      connection[1].close()

  start = time.monotonic()
  await asyncio.gather(*(client() for _ in range(clients)))
  return out, time.monotonic() - start


def one(sentence: str) -> bytes:
  return json.dumps({"sentences": [sentence], "beam_size": 1}).encode()


def text_of(answer: dict[str, Any] | None) -> str | None:
  try:
    return answer["translations"][0][0]["text"] if answer["translations"][0] else ""
  except (KeyError, IndexError, TypeError):
    return None


def percentile(xs: Sequence[float], q: float) -> float:
  xs = sorted(xs)
  return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def offline(run: Path, sentences: list[str]) -> tuple[dict[str, Any], list[str]]:
  import seq2seq
  from seq2seq import translate

  t = seq2seq.load(run)
  go = lambda: translate.translate_lines(t, sentences, progress=None, beam_size=1, batch_size=64)
  go()  # Compiles.
  start, cpu = time.monotonic(), cpu_seconds()
  found, _ = go()
  seconds = time.monotonic() - start
  texts = [hyps[0].text if hyps else "" for hyps in found]
  return {
    "sentences": len(sentences),
    "seconds": seconds,
    "sent_per_s": len(sentences) / seconds,
    "cpu_ms_per_sentence": 1000 * (cpu_seconds() - cpu) / len(sentences),
  }, texts


def load_rows(server: Server, sentences, expected, client_counts) -> list[dict[str, Any]]:
  """Per client count: throughput, latency, whether the answers are right, and the CPU
  milliseconds per sentence that the server and the clients (this process) spent."""
  rows = []
  for clients in client_counts:
    before = cpu_seconds(server.proc.pid), cpu_seconds()
    results, wall = asyncio.run(drive_lean(server.url, [one(s) for s in sentences], clients))
    server_cpu = cpu_seconds(server.proc.pid) - before[0]
    client_cpu = cpu_seconds() - before[1]
    ok = [r for r in results if r[0] == 200]
    latencies = [r[2] for r in ok]
    rows.append(
      {
        "clients": clients,
        "requests": len(sentences),
        "answered": len(ok),
        "correct": sum(text_of(r[1]) == e for r, e in zip(results, expected, strict=True)),
        "seconds": wall,
        "sent_per_s": len(ok) / wall,
        "p50_ms": 1000 * percentile(latencies, 0.5) if latencies else None,
        "p99_ms": 1000 * percentile(latencies, 0.99) if latencies else None,
        "server_cpu_ms_per_sentence": 1000 * server_cpu / len(sentences),
        "client_cpu_ms_per_sentence": 1000 * client_cpu / len(sentences),
      }
    )
    print(json.dumps(rows[-1]), flush=True)
  return rows


def faults(url, sentences, expected, count: int, rng: random.Random) -> dict[str, Any]:
  valid = [(i % len(sentences)) for i in range(count)]
  kinds = [MALFORMED_KINDS[i % len(MALFORMED_KINDS)] for i in range(count)]
  mixed = [("valid", i) for i in valid] + [("bad", k) for k in kinds]
  rng.shuffle(mixed)
  bodies = [one(sentences[x]) if what == "valid" else malformed(x, rng) for what, x in mixed]
  results, wall = asyncio.run(drive(url, bodies, 16))
  valid_right = sum(
    r[0] == 200 and text_of(r[1]) == expected[x]
    for (what, x), r in zip(mixed, results, strict=True)
    if what == "valid"
  )
  bad_refused = sum(
    isinstance(r[0], int) and 400 <= r[0] < 500 and bool(r[1] and r[1].get("error"))
    for (what, _), r in zip(mixed, results, strict=True)
    if what == "bad"
  )
  disconnects = asyncio.run(_disconnects(url, sentences[:32]))
  slow = _slow_client(url, sentences[0], expected[0])
  healthy = httpx.get(f"{url}/health", timeout=10).status_code == 200
  check = asyncio.run(drive(url, [one(sentences[0])], 1))[0][0]
  return {
    "valid": count,
    "valid_answered_right": valid_right,
    "malformed": count,
    "malformed_refused_4xx": bad_refused,
    "mixed_seconds": wall,
    "disconnected_mid_request": disconnects,
    "slow_client_answered_right": slow,
    "healthy_after": healthy and check[0] == 200 and text_of(check[1]) == expected[0],
  }


async def _disconnects(url: str, sentences: list[str]) -> int:
  """Clients that give up 10 ms into their request (the server decodes on regardless)."""
  gave_up = 0
  async with httpx.AsyncClient(headers=JSON) as http:
    for s in sentences:
      try:
        await http.post(f"{url}/translate", content=one(s), timeout=0.01)
      except httpx.TimeoutException:
        gave_up += 1
  return gave_up


def _slow_client(url: str, sentence: str, expected: str) -> bool:
  """A request whose body arrives in three pieces 0.5 s apart."""
  body = one(sentence)
  port = int(url.rsplit(":", 1)[1])
  head = (
    f"POST /translate HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
  ).encode()
  with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
    s.sendall(head)
    third = len(body) // 3
    for piece in (body[:third], body[third : 2 * third], body[2 * third :]):
      time.sleep(0.5)
      s.sendall(piece)
    raw = b""
    while chunk := s.recv(65536):
      raw += chunk
  status_line, _, rest = raw.partition(b"\r\n")
  answer = json.loads(rest.split(b"\r\n\r\n", 1)[1])
  return b" 200 " in status_line and text_of(answer) == expected


def soak(server: Server, sentences, expected, count: int) -> dict[str, Any]:
  bodies = [one(sentences[i % len(sentences)]) for i in range(count)]
  want = [expected[i % len(sentences)] for i in range(count)]
  memory = [rss_mib(server.proc.pid)]
  results, wall = [], 0.0
  tenth = max(count // 10, 1)
  for start in range(0, count, tenth):
    part, seconds = asyncio.run(drive(server.url, bodies[start : start + tenth], 16))
    results += part
    wall += seconds
    memory.append(rss_mib(server.proc.pid))
  right = sum(r[0] == 200 and text_of(r[1]) == w for r, w in zip(results, want, strict=True))
  return {
    "requests": count,
    "answered_right": right,
    "seconds": wall,
    "rss_mib": [round(m, 1) for m in memory],
    "rss_growth_mib_after_first_tenth": round(memory[-1] - memory[1], 1),
  }


def sigterm_under_load(server: Server, sentences, expected, count: int) -> dict[str, Any]:
  async def go():
    task = asyncio.create_task(drive(server.url, [one(s) for s in sentences[:count]], 64))
    await asyncio.sleep(1.0)
    stopped = await asyncio.to_thread(server.stop)
    results, _ = await task
    return stopped, results

  stopped, results = asyncio.run(go())
  right = sum(r[0] == 200 and text_of(r[1]) == e for r, e in zip(results, expected, strict=True))
  refused = sum(r[0] == 503 or r[0] == "ConnectError" for r in results)
  wrong = len(results) - right - refused
  outcomes: dict[str, int] = {}
  for r in results:
    outcomes[str(r[0])] = outcomes.get(str(r[0]), 0) + 1
  return {
    "outcomes": outcomes,  # Per HTTP status or client error's name.
    "requests": len(results),
    "answered_right": right,
    "refused": refused,
    "other": wrong,
    **stopped,
  }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--run", type=Path, required=True, help="a trained run")
  p.add_argument("--input", type=Path, required=True, help="source sentences, one per line")
  p.add_argument("--out", type=Path, required=True)
  p.add_argument("--requests", type=int, default=512)
  p.add_argument("--clients", default="1,8,64")
  p.add_argument("--malformed", type=int, default=1000)
  p.add_argument("--soak", type=int, default=10_000)
  p.add_argument("--max_words", type=int, default=50, help="the server's word limit")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--label", default=None, help="what the run is, recorded instead of its path")
  args = p.parse_args(argv)
  sentences = [s for s in args.input.read_text().splitlines() if s.strip()][: args.requests]
  sentences = [s for s in sentences if len(s.split()) <= args.max_words]
  environment = reports.environment()
  record: dict[str, Any] = {
    "date": environment["date"],
    "cpu": reports.cpu_info(),
    "load_average": {"start": reports.load_average()},
    "environment": environment,
    "run": args.label or str(args.run),
    "command": shlex.join(["python", "-m", "experiments.serve_bench", *(argv or sys.argv[1:])]),
  }
  record["offline"], expected = offline(args.run, sentences)
  server = Server(args.run, [f"--max_words={args.max_words}"])
  record["server_start_s"] = server.started_s
  try:
    record["step"] = httpx.get(f"{server.url}/info", timeout=10).json()["step"]
    clients = [int(c) for c in args.clients.split(",")]
    record["load"] = load_rows(server, sentences, expected, clients)
    rng = random.Random(args.seed)
    record["faults"] = faults(server.url, sentences, expected, args.malformed, rng)
    record["soak"] = soak(server, sentences, expected, args.soak)
    record["sigterm"] = sigterm_under_load(server, sentences, expected, len(sentences))
  finally:
    if server.proc.poll() is None:
      server.proc.kill()
  record["load_average"]["end"] = reports.load_average()
  record["offline_vs_64_clients"] = next(
    (
      r["sent_per_s"] / record["offline"]["sent_per_s"]
      for r in record["load"]
      if r["clients"] == 64
    ),
    None,
  )
  args.out.mkdir(parents=True, exist_ok=True)
  reports.publish(args.out / "serve_bench.json", record, page(record))
  return record


if __name__ == "__main__":
  main()

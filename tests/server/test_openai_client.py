#!/usr/bin/env python3
"""lio-server through the official `openai` Python client (pinned in scripts/requirements.txt).

Completions and chat, streamed and not; greedy output equal to `lio generate` on the same
prompt; n = 3; stop strings (also across a token boundary, streamed); seeded sampling
reproducible; logprobs shapes; stream_options.include_usage counts; /metrics counters move by
exactly what one request did; a second server with n-gram speculation (chapter 06) gives the same
greedy text and moves vLLM's spec_decode counters. Run by ctest as `server_openai_client` (label `server`).
"""
import json
import sys
import unittest

import server_harness as h

try:
    import openai
except ImportError:  # the venv predates the pin: a skip, not a pass
    print("SKIP: the openai package is not installed in the venv (run scripts/setup.sh)")
    sys.exit(77)

COMPLETION_PROMPT = "The capital of France is"
CHAT_QUESTION = "What is the capital of France?"
STORY_PROMPT = "Once upon a time, in a small village by the sea,"


def client(server, api_key=None):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1",
                         api_key=api_key or server.api_key, max_retries=0, timeout=300)


class Basics(h.ServerTestCase):
    def test_models_lists_served_name(self):
        models = client(self.server).models.list()
        ids = [m.id for m in models.data]
        self.assertIn(h.SERVED_MODEL, ids)

    def test_health_ok(self):
        status, _, _ = h.request("GET", self.server.port, "/health")
        self.assertEqual(status, 200)

    def test_wrong_api_key_raises_authentication_error(self):
        with self.assertRaises(openai.AuthenticationError):
            client(self.server, api_key="sk-wrong").completions.create(
                model=h.SERVED_MODEL, prompt="hi", max_tokens=1)

    def test_out_of_range_temperature_raises_bad_request(self):
        with self.assertRaises(openai.BadRequestError) as ctx:
            client(self.server).completions.create(model=h.SERVED_MODEL, prompt="hi", max_tokens=1,
                                                   temperature=5)
        self.assertIsInstance(ctx.exception.body, dict)
        self.assertEqual(ctx.exception.body.get("param"), "temperature")

    def test_unknown_model_raises_not_found(self):
        with self.assertRaises(openai.NotFoundError):
            client(self.server).chat.completions.create(
                model="no-such-model", messages=[{"role": "user", "content": "hi"}], max_tokens=1)


class Greedy(h.ServerTestCase):
    """temperature 0 through the server == `lio generate --temperature 0` (one engine, one
    tokenizer, one chat template)."""

    def test_completion_equals_lio_generate(self):
        cli = h.run_lio("generate", "--model", h.Config.model, "--prompt", COMPLETION_PROMPT,
                        "--max-tokens", "24", "--temperature", "0")
        r = client(self.server).completions.create(model=h.SERVED_MODEL, prompt=COMPLETION_PROMPT,
                                                   max_tokens=24, temperature=0)
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(len(r.choices), 1)
        self.assertGreater(len(cli["token_ids"]), 0)
        self.assertEqual(r.choices[0].text, cli["text"])
        self.assertEqual(r.choices[0].finish_reason, cli["finish_reason"])
        self.assertEqual(r.usage.completion_tokens, cli["n_generated_tokens"])
        self.assertEqual(r.usage.prompt_tokens, cli["n_prompt_tokens"])
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)

    def test_chat_equals_lio_generate_chat(self):
        cli = h.run_lio("generate", "--model", h.Config.model, "--chat", "--prompt", CHAT_QUESTION,
                        "--max-tokens", "32", "--temperature", "0")
        r = client(self.server).chat.completions.create(
            model=h.SERVED_MODEL, messages=[{"role": "user", "content": CHAT_QUESTION}], max_tokens=32,
            temperature=0)
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertGreater(len(cli["token_ids"]), 0)
        self.assertEqual(r.choices[0].message.content, cli["text"])
        # The model knows the answer with exact arithmetic; the default int8 activations answer as
        # llama.cpp's Q4_1 does, not with "Paris" (docs/engine.md, "f32 or int8 activations").
        exact = h.run_lio("generate", "--model", h.Config.model, "--chat", "--prompt", CHAT_QUESTION,
                          "--max-tokens", "32", "--temperature", "0", "--activations", "f32")
        self.assertIn("Paris", exact["text"])
        self.assertEqual(r.choices[0].finish_reason, cli["finish_reason"])
        self.assertEqual(r.usage.completion_tokens, cli["n_generated_tokens"])
        self.assertEqual(r.usage.prompt_tokens, cli["n_prompt_tokens"])

    def test_token_id_prompt_equals_text_prompt(self):
        ids = h.run_lio("tokenize", "--model", h.Config.model, "--prompt", COMPLETION_PROMPT)["ids"]
        c = client(self.server)
        by_text = c.completions.create(model=h.SERVED_MODEL, prompt=COMPLETION_PROMPT, max_tokens=12,
                                       temperature=0, extra_body={"ignore_eos": True})
        by_ids = c.completions.create(model=h.SERVED_MODEL, prompt=ids, max_tokens=12, temperature=0,
                                      extra_body={"ignore_eos": True})
        self.assertEqual(by_ids.usage.prompt_tokens, len(ids))
        self.assertEqual(by_ids.choices[0].text, by_text.choices[0].text)
        self.assertEqual(by_ids.usage.completion_tokens, 12)

    def test_echo_prepends_prompt(self):
        c = client(self.server)
        plain = c.completions.create(model=h.SERVED_MODEL, prompt=COMPLETION_PROMPT, max_tokens=8,
                                     temperature=0, extra_body={"ignore_eos": True})
        echoed = c.completions.create(model=h.SERVED_MODEL, prompt=COMPLETION_PROMPT, max_tokens=8,
                                      temperature=0, echo=True, extra_body={"ignore_eos": True})
        self.assertEqual(echoed.choices[0].text, COMPLETION_PROMPT + plain.choices[0].text)

    def test_max_completion_tokens_with_ignore_eos_is_exact(self):
        r = client(self.server).chat.completions.create(
            model=h.SERVED_MODEL, messages=[{"role": "user", "content": "Say hi."}],
            max_completion_tokens=17, temperature=0, extra_body={"ignore_eos": True})
        self.assertEqual(r.usage.completion_tokens, 17)
        self.assertEqual(r.choices[0].finish_reason, "length")


class Streaming(h.ServerTestCase):
    def test_completion_stream_equals_non_stream(self):
        c = client(self.server)
        full = c.completions.create(model=h.SERVED_MODEL, prompt=STORY_PROMPT, max_tokens=24, temperature=0,
                                    extra_body={"ignore_eos": True})
        chunks = list(c.completions.create(model=h.SERVED_MODEL, prompt=STORY_PROMPT, max_tokens=24,
                                           temperature=0, stream=True, extra_body={"ignore_eos": True}))
        self.assertGreater(len(chunks), 1, "a 24-token answer came in one chunk: not streamed")
        self.assertTrue(all(ch.object == "text_completion" for ch in chunks))
        self.assertEqual(len({ch.id for ch in chunks}), 1, "every chunk of one stream carries one id")
        self.assertEqual("".join(ch.choices[0].text for ch in chunks if ch.choices), full.choices[0].text)
        reasons = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
        self.assertEqual(reasons, ["length"])

    def test_chat_stream_equals_non_stream(self):
        c = client(self.server)
        msgs = [{"role": "user", "content": CHAT_QUESTION}]
        full = c.chat.completions.create(model=h.SERVED_MODEL, messages=msgs, max_tokens=32, temperature=0)
        chunks = list(c.chat.completions.create(model=h.SERVED_MODEL, messages=msgs, max_tokens=32,
                                                temperature=0, stream=True))
        self.assertTrue(all(ch.object == "chat.completion.chunk" for ch in chunks))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        self.assertEqual(text, full.choices[0].message.content)
        reasons = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
        self.assertEqual(reasons, [full.choices[0].finish_reason])

    def test_completion_include_usage_counts(self):
        ids = h.run_lio("tokenize", "--model", h.Config.model, "--prompt", STORY_PROMPT)["ids"]
        chunks = list(client(self.server).completions.create(
            model=h.SERVED_MODEL, prompt=STORY_PROMPT, max_tokens=20, temperature=0, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
        last = chunks[-1]
        self.assertEqual(last.choices, [], "the usage chunk has empty choices")
        self.assertIsNotNone(last.usage)
        self.assertTrue(all(ch.usage is None for ch in chunks[:-1]), "only the last chunk carries usage")
        self.assertEqual(last.usage.completion_tokens, 20)
        self.assertEqual(last.usage.prompt_tokens, len(ids))
        self.assertEqual(last.usage.total_tokens, len(ids) + 20)

    def test_chat_include_usage_equals_streamed_tokens(self):
        # Streamed tokens are counted through their logprobs entries: one per token, whatever
        # the server's chunking of the text.
        msgs = [{"role": "user", "content": "Tell me about the sea."}]
        c = client(self.server)
        chunks = list(c.chat.completions.create(
            model=h.SERVED_MODEL, messages=msgs, max_tokens=20, temperature=0, stream=True, logprobs=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
        n_streamed = sum(len(ch.choices[0].logprobs.content or [])
                         for ch in chunks if ch.choices and ch.choices[0].logprobs)
        usage = chunks[-1].usage
        self.assertIsNotNone(usage)
        self.assertEqual(n_streamed, 20)
        self.assertEqual(usage.completion_tokens, n_streamed)
        full = c.chat.completions.create(model=h.SERVED_MODEL, messages=msgs, max_tokens=20, temperature=0,
                                         extra_body={"ignore_eos": True})
        self.assertEqual(usage.prompt_tokens, full.usage.prompt_tokens)
        cli = h.run_lio("generate", "--model", h.Config.model, "--chat", "--prompt", msgs[0]["content"],
                        "--max-tokens", "1", "--temperature", "0")
        self.assertEqual(usage.prompt_tokens, cli["n_prompt_tokens"])


class ParallelSamples(h.ServerTestCase):
    def test_completion_n3(self):
        r = client(self.server).completions.create(model=h.SERVED_MODEL, prompt=STORY_PROMPT, n=3,
                                                   max_tokens=10, temperature=1.0, seed=3,
                                                   extra_body={"ignore_eos": True})
        self.assertEqual(sorted(ch.index for ch in r.choices), [0, 1, 2])
        self.assertEqual(r.usage.completion_tokens, 30)
        self.assertTrue(all(ch.finish_reason == "length" for ch in r.choices))
        self.assertGreater(len({ch.text for ch in r.choices}), 1, "3 samples at temperature 1 all equal")

    def test_chat_n3(self):
        r = client(self.server).chat.completions.create(
            model=h.SERVED_MODEL, messages=[{"role": "user", "content": "Name a colour."}], n=3, max_tokens=6,
            temperature=1.0, seed=11, extra_body={"ignore_eos": True})
        self.assertEqual(sorted(ch.index for ch in r.choices), [0, 1, 2])
        self.assertEqual(r.usage.completion_tokens, 18)

    def test_completion_n3_streamed(self):
        chunks = list(client(self.server).completions.create(
            model=h.SERVED_MODEL, prompt=STORY_PROMPT, n=3, max_tokens=8, temperature=1.0, seed=5, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
        reasons = {}
        texts = {0: "", 1: "", 2: ""}
        for ch in chunks:
            for c in ch.choices:
                self.assertIn(c.index, texts)
                texts[c.index] += c.text
                if c.finish_reason:
                    reasons[c.index] = c.finish_reason
        self.assertEqual(reasons, {0: "length", 1: "length", 2: "length"})
        self.assertTrue(all(texts.values()))
        self.assertEqual(chunks[-1].usage.completion_tokens, 24)


class Stop(h.ServerTestCase):
    """The stop string is cut out of the answer, whichever tokens it spans, streamed or not."""

    @classmethod
    def setUpClass(cls):
        r = client(cls.server).completions.create(model=h.SERVED_MODEL, prompt=STORY_PROMPT, max_tokens=40,
                                                  temperature=0, extra_body={"ignore_eos": True})
        cls.baseline = r.choices[0].text
        # A stop string from the middle of the greedy answer: 5 characters, likely across a
        # token boundary. The answer up to its first occurrence is what must come back.
        mid = len(cls.baseline) // 2
        cls.stop = cls.baseline[mid:mid + 5]
        cls.expected = cls.baseline[:cls.baseline.index(cls.stop)]

    def test_baseline_usable(self):
        self.assertGreaterEqual(len(self.baseline), 40, self.baseline)
        self.assertTrue(self.stop.strip(), f"stop {self.stop!r} is blank")

    def test_stop_non_streamed(self):
        r = client(self.server).completions.create(model=h.SERVED_MODEL, prompt=STORY_PROMPT, max_tokens=40,
                                                   temperature=0, stop=self.stop, extra_body={"ignore_eos": True})
        self.assertEqual(r.choices[0].text, self.expected)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertLess(r.usage.completion_tokens, 40)

    def test_stop_list_streamed(self):
        chunks = list(client(self.server).completions.create(
            model=h.SERVED_MODEL, prompt=STORY_PROMPT, max_tokens=40, temperature=0,
            stop=["never appears 123", self.stop], stream=True, extra_body={"ignore_eos": True}))
        self.assertEqual("".join(ch.choices[0].text for ch in chunks if ch.choices), self.expected)
        reasons = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
        self.assertEqual(reasons, ["stop"])

    def test_stop_chat(self):
        c = client(self.server)
        msgs = [{"role": "user", "content": "Write two sentences about the sea."}]
        base = c.chat.completions.create(model=h.SERVED_MODEL, messages=msgs, max_tokens=30, temperature=0,
                                         extra_body={"ignore_eos": True}).choices[0].message.content
        stop = base[len(base) // 2:len(base) // 2 + 4]
        r = c.chat.completions.create(model=h.SERVED_MODEL, messages=msgs, max_tokens=30, temperature=0,
                                      stop=[stop], extra_body={"ignore_eos": True})
        self.assertEqual(r.choices[0].message.content, base[:base.index(stop)])
        self.assertEqual(r.choices[0].finish_reason, "stop")


class Seed(h.ServerTestCase):
    def test_completion_seed_reproducible(self):
        c = client(self.server)
        kw = dict(model=h.SERVED_MODEL, prompt=STORY_PROMPT, max_tokens=24, temperature=1.0, top_p=0.95,
                  extra_body={"ignore_eos": True})
        a = c.completions.create(seed=1234, **kw).choices[0].text
        b = c.completions.create(seed=1234, **kw).choices[0].text
        other = c.completions.create(seed=4321, **kw).choices[0].text
        self.assertEqual(a, b)
        self.assertNotEqual(a, other, "seeds 1234 and 4321 gave the same 24 tokens at temperature 1")

    def test_chat_seed_reproducible_streamed_and_not(self):
        c = client(self.server)
        kw = dict(model=h.SERVED_MODEL, messages=[{"role": "user", "content": "Invent a name for a cat."}],
                  max_tokens=16, temperature=0.9, seed=77, extra_body={"ignore_eos": True})
        a = c.chat.completions.create(**kw).choices[0].message.content
        chunks = c.chat.completions.create(stream=True, **kw)
        b = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        self.assertEqual(a, b)


class Logprobs(h.ServerTestCase):
    def test_chat_top_logprobs_shape(self):
        # A question whose answer outlasts 8 tokens: no end-of-turn token among them (its logprobs
        # entry would carry "<|im_end|>" while the content, like vLLM's, leaves it out).
        r = client(self.server).chat.completions.create(
            model=h.SERVED_MODEL, messages=[{"role": "user", "content": "Write a long story about a dragon."}],
            max_tokens=8,
            temperature=0, logprobs=True, top_logprobs=3, extra_body={"ignore_eos": True})
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), r.usage.completion_tokens)
        self.assertEqual(len(content), 8)
        for e in content:
            self.assertLessEqual(e.logprob, 0.0)
            self.assertEqual(len(e.top_logprobs), 3)
            tops = [t.logprob for t in e.top_logprobs]
            self.assertEqual(tops, sorted(tops, reverse=True))
            # Greedy: the chosen token is the most likely one.
            self.assertEqual(e.token, e.top_logprobs[0].token)
            self.assertAlmostEqual(e.logprob, e.top_logprobs[0].logprob, places=4)
            self.assertIsNotNone(e.bytes)
        self.assertEqual(b"".join(bytes(e.bytes) for e in content).decode("utf-8", "replace"),
                         r.choices[0].message.content)

    def test_chat_logprobs_without_top(self):
        r = client(self.server).chat.completions.create(
            model=h.SERVED_MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4, temperature=0,
            logprobs=True, extra_body={"ignore_eos": True})
        self.assertEqual(len(r.choices[0].logprobs.content), 4)
        self.assertTrue(all(len(e.top_logprobs or []) == 0 for e in r.choices[0].logprobs.content))

    def test_completion_logprobs_shape(self):
        r = client(self.server).completions.create(model=h.SERVED_MODEL, prompt=COMPLETION_PROMPT,
                                                   max_tokens=8, temperature=0, logprobs=2,
                                                   extra_body={"ignore_eos": True})
        lp = r.choices[0].logprobs
        n = r.usage.completion_tokens
        self.assertEqual(n, 8)
        self.assertEqual(len(lp.tokens), n)
        self.assertEqual(len(lp.token_logprobs), n)
        self.assertEqual(len(lp.top_logprobs), n)
        self.assertEqual(len(lp.text_offset), n)
        self.assertEqual(lp.text_offset, sorted(lp.text_offset))
        self.assertEqual("".join(lp.tokens), r.choices[0].text)
        for tok, tlp, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            self.assertEqual(len(top), 2)  # greedy: the sampled token is one of the top 2
            self.assertLessEqual(tlp, 0.0)
            self.assertAlmostEqual(tlp, max(top.values()), places=4)
            self.assertIn(tok, top)

    def test_logprobs_are_a_distribution(self):
        # Top-20 probabilities of the first token sum to at most 1 and are not all tiny.
        r = client(self.server).chat.completions.create(
            model=h.SERVED_MODEL, messages=[{"role": "user", "content": CHAT_QUESTION}], max_tokens=1,
            temperature=0, logprobs=True, top_logprobs=20)
        import math
        p = sum(math.exp(t.logprob) for t in r.choices[0].logprobs.content[0].top_logprobs)
        self.assertLessEqual(p, 1.0 + 1e-4)
        self.assertGreater(p, 0.3)


class Metrics(h.ServerTestCase):
    # vLLM's metric names (docs/design/metrics.md) under the lio: prefix.
    REQUIRED = ["lio:num_requests_running", "lio:num_requests_waiting", "lio:kv_cache_usage_perc",
                "lio:prompt_tokens_total", "lio:generation_tokens_total", "lio:request_success_total",
                "lio:num_preemptions_total", "lio:prefix_cache_queries_total", "lio:prefix_cache_hits_total",
                "lio:time_to_first_token_seconds_bucket", "lio:inter_token_latency_seconds_bucket",
                "lio:e2e_request_latency_seconds_bucket", "lio:request_queue_time_seconds_bucket"]

    def test_exposition_has_the_vllm_families(self):
        m = h.metrics(self.server)
        missing = [n for n in self.REQUIRED if n not in m]
        self.assertEqual(missing, [])
        self.assertTrue(any("goodput" in n for n in m), "no goodput metric")
        self.assertTrue(0.0 <= h.metric_sum(m, "lio:kv_cache_usage_perc") <= 1.0)

    def test_counters_move_by_one_request(self):
        before = h.metrics(self.server)
        ids = h.run_lio("tokenize", "--model", h.Config.model, "--prompt", STORY_PROMPT)["ids"]
        client(self.server).completions.create(model=h.SERVED_MODEL, prompt=STORY_PROMPT, max_tokens=9,
                                               temperature=0, extra_body={"ignore_eos": True})
        after = h.metrics(self.server)

        def delta(name):
            return h.metric_sum(after, name) - h.metric_sum(before, name)
        self.assertEqual(delta("lio:generation_tokens_total"), 9)
        self.assertEqual(delta("lio:prompt_tokens_total"), len(ids))
        self.assertEqual(delta("lio:request_success_total"), 1)
        self.assertEqual(delta("lio:e2e_request_latency_seconds_count"), 1)
        self.assertEqual(delta("lio:time_to_first_token_seconds_count"), 1)
        self.assertEqual(delta("lio:inter_token_latency_seconds_count"), 8)  # 9 tokens, 8 gaps
        idle, _, last = h.wait_idle(self.server, within_s=1.0)
        self.assertTrue(idle, f"not idle after the request: {last}")


PERSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0,
                                                                       "maximum": 150},
                   "city": {"type": "string", "enum": ["Paris", "London", "Seoul"]}},
    "required": ["name", "age", "city"], "additionalProperties": False,
}
PERSON_PROMPTS = ["Describe a person as JSON.", "Invent a traveller and give their details.",
                  "Who lives in Seoul? Answer in JSON.", "Give me a name, an age and a city."]


def follows_person_schema(text):
    """True if `text` parses as JSON and holds exactly the schema's three fields, each valid."""
    try:
        v = json.loads(text)
    except ValueError:
        return False
    return (isinstance(v, dict) and set(v) == {"name", "age", "city"} and isinstance(v["name"], str)
            and len(v["name"]) <= 20 and isinstance(v["age"], int) and 0 <= v["age"] <= 150
            and v["city"] in ("Paris", "London", "Seoul"))


class StructuredOutputs(h.ServerTestCase):
    """response_format json_schema / json_object and the `grammar` field through the openai
    client: every constrained output parses and follows its schema (parse rate 1.0), greedy and
    sampled, n = 3, and beside speculation; the same prompts unconstrained mostly do not."""

    def schema_format(self):
        return {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON_SCHEMA, "strict": True}}

    def test_json_schema_parse_rate_is_one(self):
        c = client(self.server)
        for i, prompt in enumerate(PERSON_PROMPTS):
            for temperature in (0.0, 1.0):
                r = c.chat.completions.create(model=h.SERVED_MODEL, messages=[{"role": "user", "content": prompt}],
                                              max_tokens=80, temperature=temperature, seed=i,
                                              response_format=self.schema_format())
                text = r.choices[0].message.content
                self.assertEqual(r.choices[0].finish_reason, "stop", text)
                self.assertTrue(follows_person_schema(text), text)
                self.assertEqual(list(json.loads(text)), list(PERSON_SCHEMA["properties"]), "the schema's field order")

    def test_json_object_n3_and_streamed(self):
        c = client(self.server)
        r = c.chat.completions.create(model=h.SERVED_MODEL, messages=[{"role": "user", "content": PERSON_PROMPTS[0]}],
                                      max_tokens=120, temperature=1.0, seed=5, n=3,
                                      response_format={"type": "json_object"})
        self.assertEqual(len(r.choices), 3)
        for ch in r.choices:
            if ch.finish_reason == "stop":  # a long object may run to max_tokens
                self.assertIsInstance(json.loads(ch.message.content), dict, ch.message.content)
        streamed = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
            model=h.SERVED_MODEL, messages=[{"role": "user", "content": PERSON_PROMPTS[1]}], max_tokens=80,
            temperature=0, stream=True, response_format=self.schema_format()) if ch.choices)
        self.assertTrue(follows_person_schema(streamed), streamed)

    def test_grammar_field_on_completions(self):
        r = client(self.server).completions.create(
            model=h.SERVED_MODEL, prompt="Is the sky blue? Answer:", max_tokens=8, temperature=1.0, seed=2,
            extra_body={"grammar": 'root ::= " " ("yes" | "no") "."'})
        self.assertIn(r.choices[0].text, (" yes.", " no."))
        self.assertEqual(r.choices[0].finish_reason, "stop")

    def test_constrained_speculation_checks_drafts_and_keeps_greedy_text(self):
        # The speculating server drafts for the constrained request too (drafts cut to what the
        # schema allows, each verified row masked): its greedy text equals the plain server's,
        # drafts were verified, and there was a mask per sampled round plus one per draft.
        messages = [{"role": "user", "content": PERSON_PROMPTS[2]}]
        plain = client(self.server).chat.completions.create(
            model=h.SERVED_MODEL, messages=messages, max_tokens=80, temperature=0, response_format=self.schema_format())
        before = h.metrics(self.spec)
        r = client(self.spec).chat.completions.create(
            model=h.SERVED_MODEL, messages=messages, max_tokens=80, temperature=0, response_format=self.schema_format())
        after = h.metrics(self.spec)

        def delta(name):
            return h.metric_sum(after, name) - h.metric_sum(before, name)
        text = r.choices[0].message.content
        self.assertTrue(follows_person_schema(text), text)
        self.assertEqual(text, plain.choices[0].message.content)
        drafted = delta("lio:spec_decode_num_draft_tokens_total")
        accepted = delta("lio:spec_decode_num_accepted_tokens_total")
        self.assertGreater(drafted, 0, "a JSON object repeats '\", \"': prompt lookup should draft it")
        masks = delta("lio:structured_output_masks_total")
        # rounds = masks - drafted; each round gives 1 + its accepted tokens, the last one's stop token uncounted
        self.assertGreaterEqual(masks - drafted, r.usage.completion_tokens - accepted)
        self.assertLessEqual(masks - drafted, r.usage.completion_tokens + 2 - accepted)
        self.assertGreater(delta("lio:structured_output_mask_seconds_total"), 0)


class Speculative(h.ServerTestCase):
    """A second server with n-gram speculation (chapter 06): greedy text equals plain `lio
    generate`, streamed or not, and vLLM's spec_decode counters move."""
    REPEAT = "Repeat exactly, twice: the quick brown fox jumps over the lazy dog."

    def test_greedy_chat_equals_plain_generate_and_counters_move(self):
        before = h.metrics(self.spec)
        cli = h.run_lio("generate", "--model", h.Config.model, "--chat", "--prompt", self.REPEAT,
                        "--max-tokens", "40", "--temperature", "0")
        c = client(self.spec)
        r = c.chat.completions.create(model=h.SERVED_MODEL, messages=[{"role": "user", "content": self.REPEAT}],
                                      max_tokens=40, temperature=0)
        self.assertEqual(r.choices[0].message.content, cli["text"])
        self.assertEqual(r.usage.completion_tokens, cli["n_generated_tokens"])
        streamed = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
            model=h.SERVED_MODEL, messages=[{"role": "user", "content": self.REPEAT}], max_tokens=40,
            temperature=0, stream=True) if ch.choices)
        self.assertEqual(streamed, cli["text"])
        after = h.metrics(self.spec)

        def delta(name):
            return h.metric_sum(after, name) - h.metric_sum(before, name)
        drafts = delta("lio:spec_decode_num_drafts_total")
        drafted = delta("lio:spec_decode_num_draft_tokens_total")
        accepted = delta("lio:spec_decode_num_accepted_tokens_total")
        self.assertGreater(drafts, 0)
        self.assertGreaterEqual(drafted, drafts)
        self.assertGreater(accepted, 0, "a repeated sentence should be drafted correctly at least once")
        self.assertLessEqual(accepted, drafted)
        # Per depth (vLLM's num_accepted_tokens_per_pos): each accepted draft counts at its depth.
        per_pos = "lio:spec_decode_num_accepted_tokens_per_pos_total"
        self.assertEqual(sum(v for _, v in after.get(per_pos, [])) - sum(v for _, v in before.get(per_pos, [])),
                         accepted)
        idle, _, last = h.wait_idle(self.spec, within_s=1.0)
        self.assertTrue(idle, f"not idle after the requests: {last}")


if __name__ == "__main__":
    sys.exit(h.main({"server": h.Server(["--prefix-cache", "none"], api_key=h.API_KEY, name="openai"),
                     "spec": h.Server(["--prefix-cache", "none", "--spec-method", "ngram", "--num-speculative-tokens",
                                       "4"], api_key=h.API_KEY, name="openai-spec")}))

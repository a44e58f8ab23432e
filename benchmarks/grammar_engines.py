"""Which grammar engine enforces structured output: xgrammar or llguidance, on schema coverage, compile time and
mask time per step (one token mask for one request, the work the sampler adds per constrained row).

Two vocabularies: the presets' byte-level one (259 tokens) and a 32k byte-level BPE trained here on the Python
standard library's sources (the size class of real models; no tokenizer can be downloaded). Each engine compiles
every schema of the suite (features agents send: $ref, anyOf, enum, pattern, formats, bounds...), then, per
compiled schema, walks a valid instance token by token, timing the mask of every step.

    python3 -m benchmarks.grammar_engines [--json]

Needs `pip install xgrammar transformers` (xgrammar reads a transformers tokenizer) beside llguidance.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sysconfig
import tempfile
import time
from pathlib import Path

import torch

SUITE: dict[str, tuple[dict, dict]] = {  # name -> (schema, an instance valid against it)
    "object": ({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                "required": ["name", "age"], "additionalProperties": False}, {"name": "Ada", "age": 36}),
    "enum+const": ({"type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}, "v": {"const": 1}},
                    "required": ["unit", "v"]}, {"unit": "celsius", "v": 1}),
    "nested array": ({"type": "object", "properties": {"items": {"type": "array", "items": {
        "type": "object", "properties": {"id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["id", "tags"]}}}, "required": ["items"]}, {"items": [{"id": 1, "tags": ["a", "b"]}, {"id": 2, "tags": []}]}),
    "anyOf": ({"anyOf": [{"type": "string"}, {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}]},
              {"x": 1.5}),
    "$ref/$defs": ({"$defs": {"p": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
                    "type": "object", "properties": {"a": {"$ref": "#/$defs/p"}, "b": {"$ref": "#/$defs/p"}},
                    "required": ["a", "b"]}, {"a": {"x": 1}, "b": {"x": 2}}),
    "recursive $ref": ({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {
        "type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v", "kids"]}}, "$ref": "#/$defs/node"},
        {"v": 1, "kids": [{"v": 2, "kids": []}]}),
    "pattern": ({"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["zip"]},
                {"zip": "12345"}),
    "string bounds": ({"type": "string", "minLength": 2, "maxLength": 5}, "abc"),
    "number bounds": ({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 99},
                                                         "x": {"type": "number", "exclusiveMinimum": 0}},
                       "required": ["n", "x"]}, {"n": 42, "x": 0.5}),
    "array bounds": ({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3}, [1, 2]),
    "format date-time": ({"type": "string", "format": "date-time"}, "2026-12-06T07:00:00Z"),
    "format email": ({"type": "string", "format": "email"}, "ada@example.com"),
    "format uuid": ({"type": "string", "format": "uuid"}, "123e4567-e89b-12d3-a456-426614174000"),
    "prefixItems": ({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False}, ["a", 1]),
    "additionalProperties schema": ({"type": "object", "additionalProperties": {"type": "integer"}}, {"a": 1, "b": 2}),
    "oneOf": ({"oneOf": [{"type": "integer"}, {"type": "boolean"}]}, True),
    "allOf": ({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                         {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}]}, {"a": 1, "b": 2}),
    "patternProperties": ({"type": "object", "patternProperties": {"^x_": {"type": "integer"}},
                           "additionalProperties": False}, {"x_a": 1}),
    "multipleOf": ({"type": "integer", "multipleOf": 5}, 15),
    "uniqueItems": ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, [1, 2]),
    "not": ({"not": {"type": "string"}}, 1),
    "if/then/else": ({"type": "object", "if": {"properties": {"a": {"const": 1}}}, "then": {"required": ["b"]}}, {"a": 2}),
}


def _byte_vocab(folder: Path) -> Path:
    from services.engine.make_model import write_tokenizer

    write_tokenizer(folder, 259)
    return folder / "tokenizer.json"


def _bpe_vocab(folder: Path, size: int = 32000) -> Path:
    """A byte-level BPE of `size` tokens trained on the standard library's sources (a few seconds)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(str(p) for p in stdlib.glob("*.py"))[:300]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train(files, trainers.BpeTrainer(vocab_size=size, special_tokens=["<unk>", "<s>", "</s>"],
                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    path = folder / "bpe.json"
    tok.save(str(path))
    return path


class Llguidance:
    name = "llguidance"

    def __init__(self, tokenizer_json: Path) -> None:
        import llguidance

        self.ll = llguidance
        self.tok = llguidance.LLTokenizer(tokenizer_json.read_text(), eos_token=2)
        self.vocab = self.tok.vocab_size

    def compile(self, schema: dict):
        matcher = self.ll.LLMatcher(self.tok, self.ll.LLMatcher.grammar_from_json_schema(schema))
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        return matcher

    def fill(self, matcher, mask: torch.Tensor) -> None:
        matcher.unsafe_compute_mask_ptr(mask.data_ptr(), mask.numel() * mask.element_size())

    def accept(self, matcher, token: int) -> bool:
        return matcher.consume_token(token)


class Xgrammar:
    name = "xgrammar"

    def __init__(self, tokenizer_json: Path) -> None:
        import transformers
        import xgrammar

        self.xgr = xgrammar
        hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_json), eos_token="</s>")
        self.vocab = len(hf)
        info = xgrammar.TokenizerInfo.from_huggingface(hf, vocab_size=self.vocab, stop_token_ids=[2])
        self.compiler = xgrammar.GrammarCompiler(info, cache_enabled=False)

    def compile(self, schema: dict):
        return self.xgr.GrammarMatcher(self.compiler.compile_json_schema(json.dumps(schema), strict_mode=True))

    def fill(self, matcher, mask: torch.Tensor) -> None:
        matcher.fill_next_token_bitmask(mask.view(1, -1))

    def accept(self, matcher, token: int) -> bool:
        return matcher.accept_token(token)


def _run(engine, encode) -> dict:
    rows = {}
    for name, (schema, instance) in SUITE.items():
        start = time.perf_counter()
        try:
            matcher = engine.compile(schema)
        except Exception as exc:  # what the engine refuses is the coverage figure
            rows[name] = {"ok": False, "error": str(exc).splitlines()[0][:80]}
            continue
        compile_ms = 1e3 * (time.perf_counter() - start)
        mask = torch.full(((engine.vocab + 31) // 32,), -1, dtype=torch.int32)
        steps, followed = [], True
        for token in encode(json.dumps(instance)):
            start = time.perf_counter()
            engine.fill(matcher, mask)
            steps.append(time.perf_counter() - start)
            followed = followed and bool((mask[token // 32] >> (token % 32)) & 1) and engine.accept(matcher, token)
        rows[name] = {"ok": followed, "compile_ms": compile_ms, "mask_us": 1e6 * statistics.median(steps),
                      "mask_us_max": 1e6 * max(steps), **({} if followed else {"error": "refused a valid instance"})}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from tokenizers import Tokenizer

    torch.set_num_threads(1)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for vocab_name, path in (("byte-259", _byte_vocab(Path(tmp))), ("bpe-32k", _bpe_vocab(Path(tmp)))):
            tok = Tokenizer.from_file(str(path))

            def encode(text: str, tok: Tokenizer = tok) -> list[int]:
                return tok.encode(text, add_special_tokens=False).ids

            for engine in (Llguidance(path), Xgrammar(path)):
                results[f"{engine.name} {vocab_name}"] = _run(engine, encode)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for key, rows in results.items():
        ok = [r for r in rows.values() if r["ok"]]
        print(f"\n{key}: {len(ok)}/{len(rows)} schemas; median compile {statistics.median(r['compile_ms'] for r in ok):.2f} ms, "
              f"median mask {statistics.median(r['mask_us'] for r in ok):.1f} us/step, worst schema's median "
              f"{max(r['mask_us'] for r in ok):.1f} us, worst step {max(r['mask_us_max'] for r in ok):.0f} us")
        for name, r in rows.items():
            if not r["ok"]:
                print(f"  fails {name}: {r['error']}")


if __name__ == "__main__":
    main()

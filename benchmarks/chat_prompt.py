"""What a chat prompt costs the router: rendering the checkpoint's template (ChatML, with and without tools) beside
the presets' plain one, and rendering plus encoding, per request, for a 12-message chat of about 2k tokens.

Times are this thread's CPU time (medians of rounds), so other processes on the host do not count.

Usage: python3 -m benchmarks.chat_prompt [--rounds 7] [--number 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from services.common.chat_template import load_chat_template
from services.common.tokenizer import load_tokenizer
from services.engine.make_model import write_tokenizer
from tests.chat_folders import publish

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "the weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
CHAT = [{"role": "system", "content": "Be brief."},
        *({"role": role, "content": "word " * 40} for _ in range(5) for role in ("user", "assistant")),
        {"role": "user", "content": "ok?"}]


def _cpu_us(fn: Callable[[], object], rounds: int, number: int) -> float:
    """Median over rounds of the thread CPU time per call, in microseconds."""
    times = []
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(number):
            fn()
        times.append((time.thread_time() - start) / number * 1e6)
    return statistics.median(times)


def _measure(folder: Path, tools: list[dict] | None, rounds: int, number: int) -> dict:
    template, tokenizer = load_chat_template(folder), load_tokenizer(folder)
    text = template.render(CHAT, tools=tools)
    return {"prompt_tokens": len(template.encode(tokenizer, text)),
            "render_us": round(_cpu_us(lambda: template.render(CHAT, tools=tools), rounds, number), 1),
            "encode_us": round(_cpu_us(lambda: template.encode(tokenizer, text), rounds, number), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--number", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    plain, chatml = Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())
    for folder in (plain, chatml):
        write_tokenizer(folder, 288)
    publish(chatml, "chatml")
    rows = [{"template": name, **_measure(folder, tools, args.rounds, args.number)}
            for name, folder, tools in (("chatml + tools", chatml, TOOLS), ("chatml", chatml, None), ("plain", plain, None))]
    if args.json:
        print(json.dumps(rows))
        return
    print(f"{'template':<16}{'tokens':>8}{'render µs':>12}{'encode µs':>12}")
    for r in rows:
        print(f"{r['template']:<16}{r['prompt_tokens']:>8}{r['render_us']:>12}{r['encode_us']:>12}")


if __name__ == "__main__":
    main()

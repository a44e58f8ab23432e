"""A SentencePiece-style tokenizer.json (Llama 2's layout: '▁' for spaces, one prepended, byte fallback, BPE
merges into words) and a tiny-llama checkpoint that uses it; `distserve make-model` writes byte-level ones only."""

from __future__ import annotations

import json
from pathlib import Path

from services.common.tokenizer import SPECIALS, SPIECE_SPACE

WORDS = ("the", "sky", "is", "blue", "yes", "no", "answer", "question", "café", "au", "lait", "lead", "ing", "naïve")
VOCAB_SIZE = 384


def write_spiece_tokenizer(out: Path, vocab_size: int = VOCAB_SIZE) -> None:
    from tokenizers import Tokenizer, decoders, models, normalizers, processors

    vocab = {t: i for i, t in enumerate(SPECIALS)}
    vocab.update({f"<0x{b:02X}>": len(SPECIALS) + b for b in range(256)})
    for ch in SPIECE_SPACE + "abcdefghijklmnopqrstuvwxyzéï?:":
        vocab.setdefault(ch, len(vocab))
    merges = []
    for word in (SPIECE_SPACE + w for w in WORDS):
        for i in range(2, len(word) + 1):
            if word[:i] not in vocab:
                merges.append((word[: i - 1], word[i - 1]))
                vocab[word[:i]] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(SPIECE_SPACE), normalizers.Replace(" ", SPIECE_SPACE)])
    tok.decoder = decoders.Sequence([decoders.Replace(SPIECE_SPACE, " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.add_special_tokens([*SPECIALS, *(f"<|pad{i}|>" for i in range(vocab_size - len(vocab)))])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}))


def make_spiece_model(out: Path) -> Path:
    from services.engine.make_model import make_model

    folder = make_model("tiny-llama", out, overrides={"vocab_size": VOCAB_SIZE})
    write_spiece_tokenizer(folder)
    return folder

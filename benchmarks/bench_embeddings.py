"""Embeddings beside a chat stream, side by side in one run of one server.

    python benchmarks/bench_embeddings.py [--seconds 8] [--chat-tokens 600]

The server serves the embedded default model (chat) and a random-weight BERT the shape of
bge-small-en-v1.5 (12 layers, width 384, 33M parameters: the cost of a real small embedder;
its vectors mean nothing). For each batch size (1, 16, 64 short inputs per request):

- embeddings alone: inputs/s of back-to-back /v1/embeddings requests;
- embeddings during a chat stream: the same while one /v1/chat/completions stream decodes;
- the chat stream's pace (tokens/s between its first and last token in that window) alone
  and during the embeddings.

The same is measured for the chat model's own pooled hidden states (``model: smollm2``), the
embedding that shares the chat model's weights.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path

import httpx
import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_embeddings.models import bert
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from vllm_mlx.server.launch import launched_server

TEXT = "the quick brown fox jumps over the lazy dog near the river bank at {i} in the morning"
WORDS = sorted(set(TEXT.replace("{i}", "").split()) | set("0123456789"))
BGE_SMALL = dict(
    model_type="bert",
    architectures=["BertModel"],
    hidden_size=384,
    num_hidden_layers=12,
    num_attention_heads=12,
    intermediate_size=1536,
    max_position_embeddings=512,
    vocab_size=30522,
    type_vocab_size=2,
    pad_token_id=0,
)


def write_bert(folder: Path) -> None:
    """The bge-small-shaped BERT: random weights, a WordPiece tokenizer of the words used."""
    folder.mkdir(parents=True)
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *WORDS])}
    wordpiece = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    wordpiece.normalizer = normalizers.BertNormalizer(lowercase=True)
    wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wordpiece.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    PreTrainedTokenizerFast(
        tokenizer_object=wordpiece, unk_token="[UNK]", pad_token="[PAD]", model_max_length=512
    ).save_pretrained(str(folder))
    model = bert.Model(bert.ModelArgs.from_dict(BGE_SMALL))
    mx.save_safetensors(str(folder / "model.safetensors"), dict(tree_flatten(model.parameters())))
    (folder / "config.json").write_text(json.dumps(BGE_SMALL))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))


class ChatStream:
    """One streamed chat in a thread, its token arrival times recorded (EOS held off by a
    logit bias so it runs until stopped)."""

    def __init__(self, base: str, max_tokens: int):
        self.times: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(base, max_tokens), daemon=True)

    def _run(self, base: str, max_tokens: int) -> None:
        body = {
            "model": "smollm2",
            "messages": [{"role": "user", "content": "Tell me a long story about a fox."}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
            "logit_bias": {"2": -100},
        }
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=None) as r:
            for line in r.iter_lines():
                if self._stop.is_set():
                    return
                if line.startswith("data: {") and '"content"' in line:
                    self.times.append(time.perf_counter())

    def __enter__(self) -> ChatStream:
        self._thread.start()
        while len(self.times) < 3:  # decoding, past the prefill
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def pace(self, start: float, end: float) -> float:
        inside = [t for t in self.times if start <= t <= end]
        return (len(inside) - 1) / (inside[-1] - inside[0]) if len(inside) > 1 else 0.0


def embed_rate(base: str, model: str, batch: int, seconds: float) -> tuple[float, float, float]:
    """(inputs/s, window start, window end) of back-to-back requests for ``seconds``."""
    done, n = 0, 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds or done == 0:
        texts = [TEXT.format(i=(n + j) % 10) for j in range(batch)]
        r = httpx.post(f"{base}/v1/embeddings", json={"model": model, "input": texts}, timeout=600)
        r.raise_for_status()
        done += batch
        n += batch
    end = time.perf_counter()
    return done / (end - start), start, end


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--chat-tokens", type=int, default=2000)
    parser.add_argument(
        "--models", default="bge-small-shape,smollm2", help="comma-separated: which to embed with"
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-embeddings-"))
    write_bert(tmp / "models" / "bge-small-shape")
    (tmp / "models" / "models.toml").write_text(
        'default = "smollm2"\n[models.smollm2]\npath = "default"\n'
    )
    with launched_server(None, ["--models-dir", str(tmp / "models")], tmp / "server.log") as server:
        base = server.base_url
        for model in ("bge-small-shape", "smollm2"):  # load and warm both
            embed_rate(base, model, 4, 0)
        with ChatStream(base, args.chat_tokens) as chat:
            start = time.perf_counter()
            time.sleep(args.seconds)
            alone_pace = chat.pace(start, time.perf_counter())
        print(f"chat stream alone: {alone_pace:.1f} tok/s\n")
        print(
            f"{'model':<16} {'batch':>5} {'inputs/s alone':>15} {'inputs/s w/ chat':>17} "
            f"{'chat tok/s during':>18} {'chat pace':>10}"
        )
        for model in args.models.split(","):
            for batch in (1, 16, 64):
                alone, _, _ = embed_rate(base, model, batch, args.seconds)
                with ChatStream(base, args.chat_tokens) as chat:
                    during, start, end = embed_rate(base, model, batch, args.seconds)
                    pace = chat.pace(start, end)
                print(
                    f"{model:<16} {batch:>5} {alone:>15.1f} {during:>17.1f} {pace:>18.1f} "
                    f"{pace / alone_pace:>9.0%}"
                )


if __name__ == "__main__":
    main()

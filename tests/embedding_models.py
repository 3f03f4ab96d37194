"""Tiny random-weight embedding and reranking models on disk, built from mlx-embeddings'
own classes (and mlx-lm's, for the decoders) with real tokenizers, so the server loads them
the way it loads downloaded ones: a BERT embedder (WordPiece tokenizer), a BERT
cross-encoder, a Qwen3-Embedding-style decoder embedder and a Qwen3-Reranker-style model.

Every tokenizer's size equals the model's ``vocab_size`` (a larger embedding table would let
ids through that the tokenizer cannot produce).
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
from fleet.models_dir import write_tiny_folder
from mlx.utils import tree_flatten
from mlx_embeddings.models import bert, modernbert, xlm_roberta
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

BERT_MAX_POSITIONS = 64
BERT_HIDDEN = 32
_WORDS = (
    "the a an of to in is it and or not what where who how why cat cats dog dogs bird fish "
    "paris france london england capital city river sea mountain weather rain sun snow "
    "python code function return value list string number embedding search document query "
    "answer question hello world good bad yes no one two three four five red green blue"
).split()


def _wordpiece(specials: list[str], unk: str) -> tuple[Tokenizer, dict[str, int]]:
    """A lower-casing WordPiece tokenizer over the words and their letters, ``specials``
    first (ids 0, 1, ...), and its vocabulary."""
    letters = sorted({c for w in _WORDS for c in w} | set("0123456789.,?!'"))
    tokens = dict.fromkeys([*specials, *_WORDS, *letters, *(f"##{c}" for c in letters)])
    vocab = {t: i for i, t in enumerate(tokens)}
    wordpiece = Tokenizer(models.WordPiece(vocab, unk_token=unk))
    wordpiece.normalizer = normalizers.BertNormalizer(lowercase=True)
    wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return wordpiece, vocab


def bert_tokenizer() -> PreTrainedTokenizerFast:
    """A WordPiece tokenizer with BERT's specials and its [CLS] A [SEP] B [SEP] template."""
    wordpiece, vocab = _wordpiece(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], "[UNK]")
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    wordpiece.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=wordpiece,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=BERT_MAX_POSITIONS,
    )


def xlmr_tokenizer() -> PreTrainedTokenizerFast:
    """The same words with RoBERTa's specials (<s> 0, <pad> 1) and its pair template
    (<s> A </s></s> B </s>, no token types, as XLM-RoBERTa's tokenizer)."""
    wordpiece, _ = _wordpiece(["<s>", "<pad>", "</s>", "<unk>"], "<unk>")
    wordpiece.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", 0), ("</s>", 2)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=wordpiece,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_input_names=["input_ids", "attention_mask"],
    )


def _xlmr_config(vocab_size: int, **extra: object) -> dict:
    return {
        "model_type": "xlm-roberta",
        "architectures": ["XLMRobertaModel"],
        "hidden_size": BERT_HIDDEN,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": BERT_HIDDEN * 2,
        "max_position_embeddings": BERT_MAX_POSITIONS + 2,
        "vocab_size": vocab_size,
        "type_vocab_size": 1,
        "pad_token_id": 1,
        **extra,
    }


def write_xlmr_embedder(folder: Path, *, seed: int = 6) -> Path:
    """An XLM-RoBERTa embedder (E5/BGE-M3 layout), CLS pooling as BGE-M3 declares."""
    tokenizer = xlmr_tokenizer()
    settings = _xlmr_config(len(tokenizer))
    mx.random.seed(seed)
    model = xlm_roberta.Model(xlm_roberta.ModelArgs.from_dict(settings))
    _save(folder, dict(tree_flatten(model.parameters())), settings, tokenizer)
    return _pooling(folder, pooling_mode_cls_token=True)


def write_xlmr_cross_encoder(folder: Path, *, seed: int = 7) -> Path:
    """An XLMRobertaForSequenceClassification (bge-reranker's layout), one label."""
    tokenizer = xlmr_tokenizer()
    settings = _xlmr_config(
        len(tokenizer), architectures=["XLMRobertaForSequenceClassification"], num_labels=1
    )
    mx.random.seed(seed)
    args = xlm_roberta.ModelArgs.from_dict({**settings, "add_pooling_layer": False})
    weights = {f"roberta.{k}": v for k, v in tree_flatten(xlm_roberta.Model(args).parameters())}
    weights["classifier.dense.weight"] = mx.random.normal((BERT_HIDDEN, BERT_HIDDEN)) * 0.2
    weights["classifier.dense.bias"] = mx.zeros((BERT_HIDDEN,))
    weights["classifier.out_proj.weight"] = mx.random.normal((1, BERT_HIDDEN))
    weights["classifier.out_proj.bias"] = mx.zeros((1,))
    return _save(folder, weights, settings, tokenizer)


def _modernbert_config(vocab_size: int, **extra: object) -> dict:
    return {
        "model_type": "modernbert",
        "architectures": ["ModernBertModel"],
        "hidden_size": BERT_HIDDEN,
        "num_hidden_layers": 3,
        "num_attention_heads": 2,
        "intermediate_size": BERT_HIDDEN * 2,
        "max_position_embeddings": BERT_MAX_POSITIONS,
        "local_attention": 16,
        "vocab_size": vocab_size,
        "pad_token_id": 0,
        **extra,
    }


def write_modernbert_embedder(folder: Path, *, seed: int = 8) -> Path:
    """A ModernBERT embedder (nomic-ai/modernbert-embed's layout), mean pooling."""
    tokenizer = bert_tokenizer()
    settings = _modernbert_config(len(tokenizer))
    mx.random.seed(seed)
    model = modernbert.Model(modernbert.ModelArgs.from_dict(settings))
    _save(folder, dict(tree_flatten(model.parameters())), settings, tokenizer)
    return _pooling(folder, pooling_mode_mean_tokens=True)


def write_modernbert_cross_encoder(folder: Path, *, seed: int = 9) -> Path:
    """A ModernBertForSequenceClassification with one label (gte-reranker-modernbert's
    layout), in mlx-embeddings' own class and weight names."""
    tokenizer = bert_tokenizer()
    settings = _modernbert_config(
        len(tokenizer),
        architectures=["ModernBertForSequenceClassification"],
        classifier_pooling="cls",
        num_labels=1,
        id2label={"0": "LABEL_0"},
    )
    mx.random.seed(seed)
    model = modernbert.Model(modernbert.ModelArgs.from_dict(settings))
    return _save(folder, dict(tree_flatten(model.parameters())), settings, tokenizer)


def _bert_config(vocab_size: int, **extra: object) -> dict:
    return {
        "model_type": "bert",
        "architectures": ["BertModel"],
        "hidden_size": BERT_HIDDEN,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": BERT_HIDDEN * 2,
        "max_position_embeddings": BERT_MAX_POSITIONS,
        "vocab_size": vocab_size,
        "type_vocab_size": 2,
        "pad_token_id": 0,
        **extra,
    }


def _pooling(folder: Path, **config: object) -> Path:
    """sentence-transformers' pooling module (``1_Pooling/config.json``) in ``folder``."""
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(config))
    return folder


def _save(folder: Path, weights: dict, config: dict, tokenizer: PreTrainedTokenizerFast) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(folder / "model.safetensors"), weights)
    (folder / "config.json").write_text(json.dumps(config))
    tokenizer.save_pretrained(str(folder))
    return folder


def write_bert_embedder(folder: Path, *, seed: int = 0, pooling: str = "mean", **config) -> Path:
    """A BERT embedder (sentence-transformers pooling ``pooling``; ``config`` adds keys such
    as ``is_matryoshka``)."""
    tokenizer = bert_tokenizer()
    settings = _bert_config(len(tokenizer), **config)
    mx.random.seed(seed)
    model = bert.Model(bert.ModelArgs.from_dict(settings))
    weights = dict(tree_flatten(model.parameters()))
    _save(folder, weights, settings, tokenizer)
    key = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token"}[pooling]
    return _pooling(folder, word_embedding_dimension=BERT_HIDDEN, **{key: True})


def write_bert_cross_encoder(folder: Path, *, seed: int = 1) -> Path:
    """A BertForSequenceClassification with one label, in transformers' weight names."""
    tokenizer = bert_tokenizer()
    settings = _bert_config(
        len(tokenizer), architectures=["BertForSequenceClassification"], num_labels=1
    )
    mx.random.seed(seed)
    encoder = bert.Model(bert.ModelArgs.from_dict(settings))
    weights = {f"bert.{k}": v for k, v in tree_flatten(encoder.parameters())}
    weights["classifier.weight"] = mx.random.normal((1, BERT_HIDDEN))
    weights["classifier.bias"] = mx.zeros((1,))
    return _save(folder, weights, settings, tokenizer)


def write_qwen3_embedder(folder: Path, *, seed: int = 2, **config) -> Path:
    """A Qwen3-Embedding-style decoder: a tiny qwen3 with sentence-transformers' last-token
    pooling files."""
    write_tiny_folder(folder, seed=seed)
    if config:
        settings = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**settings, **config}))
    (folder / "modules.json").write_text(
        json.dumps([{"idx": 0, "name": "0", "path": "", "type": "Transformer"}])
    )
    return _pooling(folder, word_embedding_dimension=32, pooling_mode_lasttoken=True)


def write_yes_no_reranker(folder: Path, *, seed: int = 3) -> Path:
    """A Qwen3-Reranker-style decoder scoring with the tiny vocabulary's single-token "a"
    (negative) and "ok" (positive), named in ``classifier_from_token``."""
    write_tiny_folder(folder, seed=seed)
    settings = json.loads((folder / "config.json").read_text())
    settings["classifier_from_token"] = ["a", "ok"]
    (folder / "config.json").write_text(json.dumps(settings))
    return folder


def write_embedding_models_dir(root: Path) -> Path:
    """A ``--models-dir`` of every kind: ``bert-embed`` (matryoshka), ``bert-cls`` (CLS
    pooling, fixed size), ``qwen3-embed`` (sizes 8 and 16), ``bert-reranker``,
    ``qwen3-reranker`` and ``chat`` (a tiny chat model, pooled)."""
    write_bert_embedder(root / "bert-embed", is_matryoshka=True)
    write_bert_embedder(root / "bert-cls", seed=5, pooling="cls")
    write_qwen3_embedder(root / "qwen3-embed", matryoshka_dimensions=[8, 16])
    write_bert_cross_encoder(root / "bert-reranker")
    write_yes_no_reranker(root / "qwen3-reranker")
    write_tiny_folder(root / "chat")
    return root

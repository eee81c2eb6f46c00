"""Tiny Hugging Face OPUS-MT (Marian) snapshots, written locally as transformers' own Marian
tests build them: two small SentencePiece models, an OPUS-MT vocabulary, a random
`MarianMTModel` and its configuration files. Nothing is downloaded.
"""

import io
import json
import os
import random

import sentencepiece

# Word lists of a German-like source and an English-like target language; the
# sentences are drawn from them with a fixed seed, so every snapshot has the same spm models.
GERMAN_WORDS = {
    "subject": ["Der Hund", "Die Katze", "Das Kind", "Meine Schwester", "Unser Nachbar",
                "Der Bäcker", "Die Ärztin", "Ein Vogel", "Der Lehrer", "Frau Müller"],
    "verb": ["sieht", "kauft", "findet", "mag", "trägt", "öffnet", "zählt", "malt", "sucht",
             "hört"],
    "object": ["den Ball", "das Buch", "die Tür", "einen Apfel", "das Fahrrad", "die Brücke",
               "den Schlüssel", "das Glas", "die Tüte", "den Käse"],
    "plural": ["Äpfel", "Bücher", "Gläser", "Schlüssel", "Brötchen", "Vögel"],
    "ending": [".", "!", "?", " heute.", " im Garten.", " am Montag.", " schnell.",
               " um 7 Uhr.", ", oder?", " (wirklich)!"],
}
ENGLISH_WORDS = {
    "subject": ["The dog", "The cat", "The child", "My sister", "Our neighbour", "The baker",
                "The doctor", "A bird", "The teacher", "Mrs Miller"],
    "verb": ["sees", "buys", "finds", "likes", "carries", "opens", "counts", "paints",
             "looks for", "hears"],
    "object": ["the ball", "the book", "the door", "an apple", "the bike", "the bridge",
               "the key", "the glass", "the bag", "the cheese"],
    "plural": ["apples", "books", "glasses", "keys", "rolls", "birds"],
    "ending": [".", "!", "?", " today.", " in the garden.", " on Monday.", " quickly.",
               " at 7 o'clock.", ", right?", " (really)!"],
}

SPM_VOCABULARY_SIZE = 96
"""Pieces of each SentencePiece model (its `<unk>`, `<s>` and `</s>` included)."""


def synthetic_sentences(words, count, seed):
    """`count` short sentences drawn from `words` (`GERMAN_WORDS` or `ENGLISH_WORDS`) with `seed`.

    Example:
    >>> synthetic_sentences(ENGLISH_WORDS, 2, seed=0)[0][-1] in ".!?)"
    True
    """
    rng = random.Random(seed)
    sentences = []
    for _ in range(count):
        subject, verb, ending = (rng.choice(words[key]) for key in ("subject", "verb", "ending"))
        if rng.random() < 0.3:
            thing = f"{rng.randint(2, 1999)} {rng.choice(words['plural'])}"
        else:
            thing = rng.choice(words["object"])
        sentences.append(f"{subject} {verb} {thing}{ending}")
    return sentences


GERMAN_SENTENCES = synthetic_sentences(GERMAN_WORDS, 400, seed=1)
ENGLISH_SENTENCES = synthetic_sentences(ENGLISH_WORDS, 400, seed=2)


def train_spm(sentences, vocabulary_size=SPM_VOCABULARY_SIZE):
    """Bytes of a unigram SentencePiece model with SentencePiece's default ids (`<unk>` 0,
    `<s>` 1, `</s>` 2), as OPUS-MT's `source.spm` and `target.spm` have them."""
    sentencepiece.set_random_generator_seed(0)
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        model_type="unigram",
        vocab_size=vocabulary_size,
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
    )
    return model.getvalue()


def spm_pieces(model_bytes):
    """The pieces of an spm model that an OPUS-MT vocabulary lists (not `<unk>`, `<s>`, `</s>`)."""
    processor = sentencepiece.SentencePieceProcessor(model_proto=model_bytes)
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())
            if not (processor.is_control(i) or processor.is_unknown(i))]


def marian_vocabulary(pieces, language_codes=()):
    """An OPUS-MT `vocab.json` dict: `</s>` 0, `<unk>` 1, language codes, pieces, `<pad>` last."""
    vocabulary = {"</s>": 0, "<unk>": 1}
    for piece in [*language_codes, *pieces]:
        vocabulary.setdefault(piece, len(vocabulary))
    vocabulary["<pad>"] = len(vocabulary)
    return vocabulary


def _write_json(path, value):
    with open(path, "w", encoding="utf-8") as file:
        json.dump(value, file, ensure_ascii=False, indent=2)


def write_marian_snapshot(
    folder,
    shared=True,
    seed=0,
    weights="safetensors",
    d_model=16,
    layers=2,
    heads=4,
    ffn=32,
    max_positions=128,
    language_codes=(),
    end_bias=0.0,
    **config_overrides,
):
    """Writes a tiny OPUS-MT snapshot into `folder`, as the Hugging Face Hub serves one.

    Files: `source.spm`, `target.spm`, `vocab.json` (and `target_vocab.json` when
    `shared=False`), `tokenizer_config.json`, `config.json`, `generation_config.json` and the
    weights of a random `MarianMTModel` (`model.safetensors`, or `pytorch_model.bin` for
    `weights="bin"`). `transformers.MarianTokenizer.from_pretrained(folder)` and
    `MarianMTModel.from_pretrained(folder)` load it.

    A shared vocabulary lists the pieces of both spm models in a seeded shuffled order (a
    real joint vocabulary is sorted by frequency, not by spm id). Separate vocabularies
    (`share_encoder_decoder_embeddings: false`) are built as Hugging Face's converter
    builds them: each from its own spm model, both of the same size, so `<pad>` has the one
    `pad_token_id` in both, and `decoder_vocab_size == vocab_size`.

    Args:
        folder: str or path. Created if missing.
        shared: bool. One vocabulary for both sides (most OPUS-MT models) or two.
        seed: int. Seeds the vocabulary order and the weights.
        weights: `"safetensors"` or `"bin"`.
        d_model, layers, heads, ffn, max_positions: int. Model size (encoder and decoder).
        language_codes: strings such as `">>fr<<"`, listed after `<unk>` in the (shared)
            vocabulary, as multilingual OPUS-MT models list them.
        end_bias: float. Added to the end token's `final_logits_bias`, so that random
            outputs end at varied lengths instead of running to `max_length`.
        **config_overrides: more `MarianConfig` arguments (they win over the ones above).

    Returns:
        `folder`, as a str.
    """
    import torch
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    if weights not in ("safetensors", "bin"):
        raise ValueError(f'`weights` must be "safetensors" or "bin". Received: {weights!r}')
    if language_codes and not shared:
        raise ValueError("`language_codes` needs `shared=True` (separate vocabularies must "
                         "have the same size).")
    folder = str(folder)
    os.makedirs(folder, exist_ok=True)
    source_spm, target_spm = train_spm(GERMAN_SENTENCES), train_spm(ENGLISH_SENTENCES)
    for name, model_bytes in (("source.spm", source_spm), ("target.spm", target_spm)):
        with open(os.path.join(folder, name), "wb") as file:
            file.write(model_bytes)
    source_pieces, target_pieces = spm_pieces(source_spm), spm_pieces(target_spm)
    if shared:
        pieces = list(dict.fromkeys(source_pieces + target_pieces))
        random.Random(seed).shuffle(pieces)
        vocabulary = marian_vocabulary(pieces, language_codes)
        decoder_vocabulary_size = len(vocabulary)
    else:
        vocabulary = marian_vocabulary(source_pieces)
        target_vocabulary = marian_vocabulary(target_pieces)
        if len(target_vocabulary) != len(vocabulary):
            raise AssertionError("both spm models must have the same number of pieces")
        _write_json(os.path.join(folder, "target_vocab.json"), target_vocabulary)
        decoder_vocabulary_size = len(target_vocabulary)
    _write_json(os.path.join(folder, "vocab.json"), vocabulary)
    _write_json(os.path.join(folder, "tokenizer_config.json"),
                {"source_lang": "de", "target_lang": "en", "separate_vocabs": not shared})

    pad = len(vocabulary) - 1
    settings = dict(
        vocab_size=len(vocabulary),
        decoder_vocab_size=decoder_vocabulary_size,
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn,
        activation_function="swish",
        pad_token_id=pad,
        eos_token_id=0,
        bos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
        max_position_embeddings=max_positions,
        scale_embedding=True,
        share_encoder_decoder_embeddings=shared,
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )
    settings.update(config_overrides)
    torch.manual_seed(seed)
    model = MarianMTModel(MarianConfig(**settings)).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        # Zero biases and unit LayerNorms would hide a weight the importer leaves out.
        bias = model.final_logits_bias
        bias.copy_(0.1 * torch.randn(bias.shape, generator=generator))
        bias[0, 0] += end_bias
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.copy_(1 + 0.2 * torch.randn(module.weight.shape, generator=generator))
                module.bias.copy_(0.2 * torch.randn(module.bias.shape, generator=generator))
    model.generation_config = GenerationConfig(
        bad_words_ids=[[pad]], bos_token_id=0, decoder_start_token_id=pad, eos_token_id=0,
        forced_eos_token_id=0, max_length=64, num_beams=4, pad_token_id=pad,
        renormalize_logits=True,
    )
    model.save_pretrained(folder)
    if weights == "bin":  # transformers 5 saves only safetensors; older snapshots hold a .bin
        torch.save(model.state_dict(), os.path.join(folder, "pytorch_model.bin"))
        os.remove(os.path.join(folder, "model.safetensors"))
    return folder

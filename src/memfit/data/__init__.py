"""Data: loading records, the real tokenizer, token lengths, padding and packing.

Needs the ``data`` extra (numpy, pyarrow, tokenizers, sentencepiece) and transformers for tokenizers.
Import the modules directly (``memfit.data.load``, ``memfit.data.tokenize``, ``memfit.data.lengths``,
``memfit.data.pack``); this package imports nothing heavy.
"""

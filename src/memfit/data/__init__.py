"""Data: reading records, the real tokenizer, token lengths, padding and packing.

==========================  ======================================================================
module                      what it holds
==========================  ======================================================================
``formats``                 the file readers (JSONL, JSON, CSV, Parquet, ``save_to_disk``), streamed
                            (``open_records``) or whole (``load_records``)
``records``                 the record schema: ``FieldSpec``, ``infer_fields``, ``normalise_messages``
``tokenizer``               loading a tokenizer offline, and which EOS a text example gets
``tokenize``                records to ``input_ids`` and ``labels`` (-100 where no loss is taken), batch
                            by batch (``iter_tokenized``)
``lengths``                 the token-length distribution, p95, truncation
``padding``                 padding waste of random, length-grouped and packed batches
``binpack``                 which lengths share a row (``fill_rows``)
``pack``                    packed rows with restarting positions and preserved labels, in memory
                            (``pack``) or streamed to a writer (``pack_stream``)
``io``                      writing packed rows (JSONL, Parquet), row by row, atomically
``torch.collator``          packed rows to batches a transformers model keeps apart (torch)
``torch.verify``            proving a packing with a real model (torch)
==========================  ======================================================================

Needs the ``data`` extra (numpy, pyarrow, tokenizers, sentencepiece, transformers for the tokenizer
loader); :mod:`memfit.data.torch` needs the ``torch`` extra. Import the modules directly; this package
imports nothing heavy.
"""

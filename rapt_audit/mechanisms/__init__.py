"""Privacy mechanisms as pure functions: noise, nearest-neighbour decoding, privatization, calibration.

Owns: :mod:`~rapt_audit.mechanisms.noise` (dχ and Laplace samplers and the checks of their
parameters), :mod:`~rapt_audit.mechanisms.nn_search` (exact-in-effect nearest-neighbour search) with
:mod:`~rapt_audit.mechanisms.nn_exact` (the float64 reference search, also its torch-free cold start),
:mod:`~rapt_audit.mechanisms.privatize` (token and word engines), :mod:`~rapt_audit.mechanisms.engines`
(building those engines once per run), :mod:`~rapt_audit.mechanisms.exponential` (the exponential
mechanism over a finite set of words: SanText's, CusText's and TEM's sampler),
:mod:`~rapt_audit.mechanisms.pos` (spaCy tagging and the PCT2T lexicons), :mod:`~rapt_audit.mechanisms.analyses` (spaCy's tags and entities of clean texts,
cached on disk for audits), :mod:`~rapt_audit.mechanisms.calibration` (replacement probability per η,
plausible deniability) and :mod:`~rapt_audit.mechanisms.align` (aligning original and released units).

May import: :mod:`rapt_audit.api`, :mod:`rapt_audit.scoring`, :mod:`rapt_audit.encoder`.
"""

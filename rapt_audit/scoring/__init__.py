"""Numbers with their uncertainty: confidence intervals, the metric registry, classification scores.

Owns: :mod:`~rapt_audit.scoring.stats` (bootstrap, Wilson and t intervals),
:mod:`~rapt_audit.scoring.metrics` (every metric's kind and direction, declared once) and
:mod:`~rapt_audit.scoring.classification` (the one scorer: accuracy, macro-F1 and AUC of predicted labels
and probabilities) and :mod:`~rapt_audit.scoring.content_tokens` (the inversion attacks' common unit:
content-word recovery against the release-ignoring prior), and :mod:`~rapt_audit.scoring.significance` (every
rule that says whether a difference is beyond noise: the gate's, the claims' and the matched readings').

May import: :mod:`rapt_audit.api`, numpy, scipy and scikit-learn (the last two inside functions).
"""

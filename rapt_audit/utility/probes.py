"""Task utility of text releases, measured the way the service would see them.

The classifier is trained on privatized victim-train texts and evaluated on privatized
victim-test texts (users privatize at inference too, RAPT Sec. III). This module holds the cheap
bag-of-words probe (TF-IDF + logistic regression) that every text defense can use on CPU in
seconds; transformer-based customization (prompt tuning, prefix tuning, LoRA) lives elsewhere.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rapt_audit.api.errors import DataError
from rapt_audit.api.types import Estimate, Record
from rapt_audit.scoring.classification import label_scores


def require_labels(records: Sequence[Record], *, split: str) -> np.ndarray:
    """The task labels of ``records``, or a :class:`DataError` when any is missing."""
    if not records:
        raise DataError(f"the {split} split is empty; utility needs labelled examples")
    missing = sum(r.label is None for r in records)
    if missing:
        raise DataError(f"{missing} of {len(records)} records in the {split} split have no task label; "
                        "utility needs a labelled dataset (sst2, qqp, synthetic)")
    return np.array([r.label for r in records])


def bow_probe_utility(train_texts: Sequence[str], train_labels: np.ndarray, test_texts: Sequence[str],
                      test_labels: np.ndarray, *, rng: np.random.Generator) -> dict[str, Estimate]:
    """Accuracy and macro-F1 of a TF-IDF + logistic-regression classifier, with bootstrap CIs.

    The regularisation strength is fixed (C = 1), never tuned on the test split.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer  # lazy (sklearn)
    from sklearn.linear_model import LogisticRegression  # lazy (sklearn)

    if len(set(train_labels.tolist())) < 2:
        raise DataError("the training split holds a single label; utility needs at least two classes")
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True)
    features = vectorizer.fit_transform(train_texts)
    classifier = LogisticRegression(C=1.0, max_iter=2000)
    classifier.fit(features, train_labels)
    return label_scores(classifier.predict(vectorizer.transform(test_texts)), test_labels, rng=rng)


def probe_utility(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray, *,
                  rng: np.random.Generator) -> dict[str, Estimate]:
    """Accuracy and macro-F1 of a standardised logistic-regression probe, with bootstrap CIs."""
    from sklearn.linear_model import LogisticRegression  # lazy (sklearn)
    from sklearn.pipeline import make_pipeline  # lazy (sklearn)
    from sklearn.preprocessing import StandardScaler  # lazy (sklearn)

    classifier = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=3000))
    classifier.fit(train_x, train_y)
    return label_scores(classifier.predict(test_x), test_y, rng=rng)
